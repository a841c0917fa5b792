use std::time::Duration;

use super::RateLimit;

#[test]
fn parsed_shown_and_checked() {
    let l: RateLimit = "100/s".parse().unwrap();
    assert_eq!(l, RateLimit::per_second(100));
    assert_eq!(l.per(), Duration::from_secs(1));
    assert_eq!(l.burst(), 10);
    assert_eq!(l.to_string(), "100/s");
    let m: RateLimit = " 30 / min ".parse().unwrap();
    assert_eq!(m, RateLimit::per_minute(30));
    assert_eq!(m.burst(), 1);
    assert_eq!(m.to_string(), "30/min");
    assert_eq!("1000/sec".parse::<RateLimit>().unwrap().burst(), 100);
    assert_eq!(RateLimit::per_second(5).with_burst(50).burst(), 50);
    for bad in ["", "100", "0/s", "-1/s", "10/h", "x/s", "10/"] {
        assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
    }
    assert!(RateLimit::per_second(0).validate().is_err());
    assert!(RateLimit::per_second(1).with_burst(0).validate().is_err());
    assert!(RateLimit::per_second(1).validate().is_ok());
    assert!((RateLimit::per_second(100).per_ms() - 0.1).abs() < 1e-12);
    let custom = RateLimit::per_minute(30).with_burst(5);
    assert_eq!(custom.to_string(), "30/min burst 5");
    assert_eq!(custom.to_string().parse::<RateLimit>().unwrap(), custom);
    assert!("10/s burst 0".parse::<RateLimit>().is_err());
    assert!("10/s burst x".parse::<RateLimit>().is_err());
    let json = serde_json::to_string(&custom).unwrap();
    assert_eq!(json, "\"30/min burst 5\"");
    assert_eq!(serde_json::from_str::<RateLimit>(&json).unwrap(), custom);
    assert!(serde_json::from_str::<RateLimit>("\"0/s\"").is_err());
}
