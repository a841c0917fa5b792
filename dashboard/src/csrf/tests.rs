use super::*;

#[test]
fn a_token_verifies_under_its_secret_only_and_must_match_the_cookie() {
    let (a, b) = (random_secret(), random_secret());
    let now = now();
    let t = issue(&a, now);
    assert!(valid(&a, &t, now));
    assert!(!valid(&b, &t, now), "another secret");
    assert!(accepts(&a, Some(&t), &t, now));
    assert!(!accepts(&a, None, &t, now), "no cookie");
    let other = issue(&a, now);
    assert!(
        !accepts(&a, Some(&other), &t, now),
        "cookie and form differ"
    );
    let (signed, _) = t.rsplit_once('.').unwrap();
    let forged = format!("{signed}.{}", "0".repeat(64));
    assert!(!accepts(&a, Some(&forged), &forged, now), "a forged MAC");
    assert!(!valid(&a, "garbage", now));
}

#[test]
fn a_token_expires_and_its_expiry_cannot_be_moved() {
    let a = random_secret();
    let issued = 1_000_000;
    let t = issue(&a, issued);
    let end = issued + TTL.as_secs();
    assert!(valid(&a, &t, end), "valid up to its expiry");
    assert!(!valid(&a, &t, end + 1), "refused after it");
    let (nonce, rest) = t.split_once('.').unwrap();
    let (_, tag) = rest.split_once('.').unwrap();
    let moved = format!("{nonce}.{}.{tag}", end + 3600);
    assert!(!valid(&a, &moved, end + 1), "the expiry is signed");
}
