use super::asking_each;

#[test]
fn a_cluster_pipeline_asks_before_each_command() {
    let mut p = redis::pipe();
    p.cmd("XADD").arg("s").arg("*").arg("f").arg("1");
    p.cmd("XADD").arg("s").arg("*").arg("f").arg("2");
    let names: Vec<Vec<u8>> = asking_each(&p)
        .cmd_iter()
        .map(|c| match c.args_iter().next() {
            Some(redis::Arg::Simple(a)) => a.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(names, [&b"ASKING"[..], b"XADD", b"ASKING", b"XADD"]);
}
