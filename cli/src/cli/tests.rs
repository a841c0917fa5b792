use super::*;

#[test]
fn the_command_line_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn pending_lists_or_acts() {
    let cli = Cli::try_parse_from(["rillkit", "pending", "s", "g", "--count", "3"]).unwrap();
    let Command::Pending(p) = cli.command else {
        panic!("pending")
    };
    assert!(p.action.is_none());
    let select = p.select.expect("a selection");
    assert_eq!((select.stream.as_str(), select.count), ("s", 3));
    let cli = Cli::try_parse_from([
        "rillkit",
        "pending",
        "ack",
        "s",
        "g",
        "--min-idle",
        "10m",
        "--yes",
    ])
    .unwrap();
    let Command::Pending(p) = cli.command else {
        panic!("pending")
    };
    assert!(matches!(
        p.action,
        Some(PendingAction::Ack { yes: true, .. })
    ));
    assert!(Cli::try_parse_from(["rillkit", "pending", "s"]).is_err());
}
