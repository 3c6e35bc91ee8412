#!/usr/bin/env python3
"""MapReduce-style word count on jobgate: an indexed array job maps, a dependent job reduces.

The map step is one job with `completions: 4, parallelism: 2`: four runs, two at a time, each
counting the words of the input line its JOB_COMPLETION_INDEX names and writing the count to
a part file. The reduce step is a second job with `dependsOn: [<map id>]`: jobgate holds it
(PENDING, reason WaitingForDependencies) until every map run has succeeded, then runs it; it
adds the parts up and writes the total as its result. Had the map failed, the reduce would
fail at once with reason DependencyFailed.

Runs against the local executor as is (both steps share a directory on this machine, which
the jobs' user must be able to write: `--dir` must be, the default one is); on Kubernetes the
steps would share a volume or object storage instead.

    cargo run --release &          # jobgate on http://127.0.0.1:8080
    python3 examples/mapreduce.py  # or: python3 examples/mapreduce.py --url http://host:port

Standard library only. It waits by asking for the job every half second to stay dependency
free; a real client subscribes to `jobStatus` over WebSocket instead and is told at once.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "and runs far away",
    "the end",
]

SUBMIT = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id phase } } }"
JOB = """query($id: ID!) { job(id: $id) {
  id name phase result startedAt finishedAt events { phase reason } } }"""


def graphql(url, query, variables):
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(
        url + "/graphql", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        answer = json.load(response)
    if answer.get("errors"):
        sys.exit(f"jobgate refused: {answer['errors'][0]['message']}")
    return answer["data"]


def wait_until_finished(url, job_id, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        job = graphql(url, JOB, {"id": job_id})["job"]
        if job["phase"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return job
        if time.monotonic() > deadline:
            sys.exit(f"job {job_id} is still {job['phase']} after {timeout} s")
        time.sleep(0.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="where jobgate listens")
    parser.add_argument("--dir", help="the shared directory (default: a new temporary one)")
    args = parser.parse_args()
    shared = args.dir
    if not shared:
        shared = tempfile.mkdtemp(prefix="jobgate-wordcount-")
        # jobgate may run its jobs as another user (`nobody`, when it runs as root): let
        # them write their parts here, as in /tmp.
        os.chmod(shared, 0o1777)
    with open(os.path.join(shared, "input.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")

    # Map: one run per input line, two at a time.
    map_job = graphql(args.url, SUBMIT, {"input": {
        "name": "wordcount-map",
        "completions": len(LINES),
        "parallelism": 2,
        "env": [{"name": "SHARED", "value": shared}],
        "command": ["sh", "-c",
                    'sed -n "$((JOB_COMPLETION_INDEX + 1))p" "$SHARED/input.txt" | wc -w'
                    ' > "$SHARED/part-$JOB_COMPLETION_INDEX"'],
    }})["submitJob"]["job"]
    print(f"map    {map_job['id']} {map_job['phase']}")

    # Reduce: held until the map job has succeeded; its result is the total.
    reduce_job = graphql(args.url, SUBMIT, {"input": {
        "name": "wordcount-reduce",
        "dependsOn": [map_job["id"]],
        "env": [{"name": "SHARED", "value": shared}],
        "command": ["sh", "-c",
                    'cat "$SHARED"/part-* | awk \'{ total += $1 } END { print total }\''
                    ' > "$JOBGATE_RESULT_FILE"'],
    }})["submitJob"]["job"]
    print(f"reduce {reduce_job['id']} {reduce_job['phase']} (waiting for the map step)")

    done = wait_until_finished(args.url, reduce_job["id"])
    steps = " -> ".join(f"{e['phase']}({e['reason']})" for e in done["events"])
    print(f"reduce went {steps}")
    if done["phase"] != "SUCCEEDED":
        sys.exit(f"the reduce step ended {done['phase']}")
    print(f"total words: {done['result'].strip()}")


if __name__ == "__main__":
    main()
