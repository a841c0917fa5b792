use super::{Error, refused_command};

#[test]
fn a_refusal_of_a_command_sent_on_connect_names_that_command() {
    let noperm = |cmd: &str| {
        Error::from_redis(redis::make_extension_error(
            "NOPERM".into(),
            Some(format!(
                "this user has no permissions to run the '{cmd}' command"
            )),
        ))
    };
    assert_eq!(
        refused_command(&noperm("cluster|slots")),
        Some("cluster|slots")
    );
    assert_eq!(refused_command(&noperm("xadd")), None, "the step's own");
}
