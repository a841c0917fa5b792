//! Signed double-submit CSRF tokens with an expiry: no server-side session.
//!
//! A token is `<nonce>.<expires>.<mac>`: 16 random bytes in hex, the Unix
//! time (s) after which it is refused, and the hex of HMAC-SHA256 over
//! `<nonce>.<expires>` with the dashboard's secret. A page sets it as the
//! cookie `rillkit_csrf` (`SameSite=Strict; HttpOnly`, `Secure` over TLS,
//! path of the dashboard, as long-lived as the token) and puts the same
//! value in each form. A `POST` is accepted only when the form's token
//! equals the cookie's, its MAC verifies and it has not expired: a
//! cross-site page can neither read the cookie nor send it (`SameSite`), a
//! cookie planted by a sibling subdomain fails the MAC, and a token copied
//! out of a browser stops working within [`TTL`]. (The actions also check
//! the request's `Origin`, so a copied token replayed from elsewhere is
//! refused at once.)

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

/// How long a token is accepted after it was issued.
pub(super) const TTL: std::time::Duration = std::time::Duration::from_secs(8 * 3600);

/// Seconds since the Unix epoch.
pub(super) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh token, accepted until `now + TTL`.
pub(super) fn issue(secret: &[u8], now: u64) -> String {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).expect("the operating system's random source");
    let signed = format!("{}.{}", hex(&nonce), now + TTL.as_secs());
    let tag = hex(&mac(secret, &signed).finalize().into_bytes());
    format!("{signed}.{tag}")
}

/// Whether `token` is one this secret signed and it has not expired at
/// `now`.
pub(super) fn valid(secret: &[u8], token: &str, now: u64) -> bool {
    let Some((signed, tag)) = token.rsplit_once('.') else {
        return false;
    };
    let Some((nonce, expires)) = signed.split_once('.') else {
        return false;
    };
    if nonce.len() != 32 || tag.len() != 64 {
        return false;
    }
    let (Some(tag), Ok(expires)) = (unhex(tag), expires.parse::<u64>()) else {
        return false;
    };
    mac(secret, signed).verify_slice(&tag).is_ok() && now <= expires
}

/// Whether a form's token may act at `now`: it equals the cookie's, is
/// signed and has not expired.
pub(super) fn accepts(secret: &[u8], cookie: Option<&str>, form: &str, now: u64) -> bool {
    cookie.is_some_and(|c| c == form) && valid(secret, form, now)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests;
