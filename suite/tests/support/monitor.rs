//! `MONITOR` on a thread of its own: what a test asserts about the
//! commands the library sent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Every command the server runs while it lives, from `MONITOR` on a
/// thread of its own.
pub struct Monitor {
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    pub fn start(url: &str) -> Monitor {
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_connection().unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let ok: String = redis::cmd("MONITOR").query(&mut conn).unwrap();
        assert_eq!(ok, "OK");
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (l, s) = (lines.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match conn.recv_response() {
                    Ok(redis::Value::SimpleString(line)) => l.lock().unwrap().push(line),
                    Ok(_) => {}
                    Err(e) if e.is_timeout() => {}
                    Err(_) => break,
                }
            }
        });
        Monitor {
            lines,
            stop,
            thread: Some(thread),
        }
    }

    /// The commands seen so far whose name is `name`, upper case, each as
    /// its quoted arguments.
    pub fn calls(&self, name: &str) -> Vec<Vec<String>> {
        let quoted = format!("\"{name}\"");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let args = &l[l.find("] ")? + 2..];
                let words: Vec<String> = args
                    .split("\" \"")
                    .map(|w| w.trim_matches('"').to_owned())
                    .collect();
                words
                    .first()
                    .is_some_and(|w| format!("\"{}\"", w.to_ascii_uppercase()) == quoted)
                    .then_some(words)
            })
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
