//! Standard Webhooks signatures: `whsec_` secrets and the `webhook-signature` header.
//!
//! It owns the secret's format (`whsec_` + base64 of 32 random bytes from the operating
//! system's CSPRNG) and the signature scheme: `v1,` + base64(HMAC-SHA256(key = the decoded
//! secret, message = `{webhook-id}.{webhook-timestamp}.{body}`)). It does no I/O besides
//! reading randomness and knows nothing of endpoints or deliveries.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SecureRandom as _;

const PREFIX: &str = "whsec_";

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    // The system's CSPRNG does not fail on the platforms jobgate runs on; if it ever did, a
    // secret of zeros must not be handed out.
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .expect("the operating system's random number generator works");
    format!("{PREFIX}{}", STANDARD.encode(key))
}

/// The HMAC key of a secret: its base64 part, decoded. A secret this module did not make
/// (one without the prefix, or not base64) is used as raw bytes, as the specification allows.
fn key_of(secret: &str) -> Vec<u8> {
    match secret.strip_prefix(PREFIX).map(|b| STANDARD.decode(b)) {
        Some(Ok(key)) => key,
        _ => secret.as_bytes().to_vec(),
    }
}

/// The `webhook-signature` header value for one message.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key_of(secret));
    let mut context = ring::hmac::Context::with_key(&key);
    context.update(id.as_bytes());
    context.update(b".");
    context.update(timestamp.to_string().as_bytes());
    context.update(b".");
    context.update(body);
    format!("v1,{}", STANDARD.encode(context.sign().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification (its reference libraries' test).
    #[test]
    fn signs_the_specifications_example() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_prefixed_random_32_bytes() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with("whsec_"));
        assert_eq!(key_of(&a).len(), 32);
        assert_ne!(a, b);
    }
}
