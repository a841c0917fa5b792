//! Signed double-submit CSRF tokens: no server-side session.
//!
//! A token is `<nonce>.<mac>`: 16 random bytes in hex, and the hex of
//! HMAC-SHA256 over the nonce with the dashboard's secret. A page sets it
//! as the cookie `rillkit_csrf` (`SameSite=Strict; HttpOnly`, path of the
//! dashboard) and puts the same value in each form. A `POST` is accepted
//! only when the form's token equals the cookie's and its MAC verifies: a
//! cross-site page can neither read the cookie nor send it (`SameSite`), and
//! a cookie planted by a sibling subdomain fails the MAC.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The cookie's name.
pub(super) const COOKIE: &str = "rillkit_csrf";

/// 32 random bytes from the operating system.
pub(super) fn random_secret() -> [u8; 32] {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).expect("the operating system's random source");
    key
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac(secret: &[u8], nonce: &str) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key");
    m.update(nonce.as_bytes());
    m
}

/// A fresh token.
pub(super) fn issue(secret: &[u8]) -> String {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).expect("the operating system's random source");
    let nonce = hex(&nonce);
    let tag = hex(&mac(secret, &nonce).finalize().into_bytes());
    format!("{nonce}.{tag}")
}

/// Whether `token` is one this secret signed.
pub(super) fn valid(secret: &[u8], token: &str) -> bool {
    let Some((nonce, tag)) = token.split_once('.') else {
        return false;
    };
    if nonce.len() != 32 || tag.len() != 64 {
        return false;
    }
    let Some(tag) = unhex(tag) else {
        return false;
    };
    mac(secret, nonce).verify_slice(&tag).is_ok()
}

/// Whether a form's token may act: it equals the cookie's, and is signed.
pub(super) fn accepts(secret: &[u8], cookie: Option<&str>, form: &str) -> bool {
    cookie.is_some_and(|c| c == form) && valid(secret, form)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_under_its_secret_only_and_must_match_the_cookie() {
        let (a, b) = (random_secret(), random_secret());
        let t = issue(&a);
        assert!(valid(&a, &t));
        assert!(!valid(&b, &t), "another secret");
        assert!(accepts(&a, Some(&t), &t));
        assert!(!accepts(&a, None, &t), "no cookie");
        let other = issue(&a);
        assert!(!accepts(&a, Some(&other), &t), "cookie and form differ");
        let (nonce, _) = t.split_once('.').unwrap();
        let forged = format!("{nonce}.{}", "0".repeat(64));
        assert!(!accepts(&a, Some(&forged), &forged), "a forged MAC");
        assert!(!valid(&a, "garbage"));
    }
}
