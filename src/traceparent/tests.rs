use super::TraceParent;

#[test]
fn parses_the_spec_example_and_refuses_what_the_spec_refuses() {
    let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let tp: TraceParent = v.parse().unwrap();
    assert_eq!(tp.as_str(), v);
    assert_eq!(tp.parent_id(), "00f067aa0ba902b7");
    assert!(tp.sampled());
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
    ] {
        assert!(bad.parse::<TraceParent>().is_err(), "{bad}");
    }
    let later: TraceParent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what"
        .parse()
        .unwrap();
    assert_eq!(
        later.as_str(),
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    );
    assert!(!later.sampled());
}
