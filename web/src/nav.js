// Moving between views: the route lives in the URL's hash.

export function navigate(path) {
  window.location.hash = path;
}
