//! Skipping a test that needs what this machine lacks (a GPU, nvcc, the
//! shared fixtures), visibly, and never where the caller asked for it.
//!
//! - A skip is written straight to the terminal's stderr (libtest does not
//!   capture it, so it shows beside `ok`) and, when `AOTUNE_SKIP_LOG` names a
//!   file, appended there as one line `test<TAB>reason`; `make test` prints
//!   a count per reason from that file at the end.
//! - With `AOTUNE_REQUIRE_GPU=1` (every GPU-machine script sets it) a skip is
//!   a failure: [`skip`] panics, naming the test and what was missing.
//!
//! Only absence is a reason to skip: a driver library that is present but
//! fails to initialise, or a compiler that is present but fails to compile,
//! is a failure wherever it happens (the callers' contract).

use std::io::Write;

/// The variable that turns skips into failures.
pub const REQUIRE_GPU_VAR: &str = "AOTUNE_REQUIRE_GPU";
/// The file skips are appended to, one `test<TAB>reason` line each.
pub const SKIP_LOG_VAR: &str = "AOTUNE_SKIP_LOG";

/// True when `AOTUNE_REQUIRE_GPU` is set to anything but empty or `0`.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_GPU_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Records that `test` did not run because of `why`; panics instead when
/// [`required`]. The caller returns right after.
pub fn skip(test: &str, why: &str) {
    if required() {
        panic!("{test}: {REQUIRE_GPU_VAR} is set but this test cannot run here: {why}");
    }
    let why = why.lines().next().unwrap_or_default();
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        append(std::path::Path::new(&path), test, why);
    }
}

/// [`skip`] for the test running on this thread (libtest names each
/// test's thread after the test).
pub fn here(why: &str) {
    let thread = std::thread::current();
    skip(thread.name().unwrap_or("unnamed test"), why);
}

/// Appends `test<TAB>reason` to the skip log (errors ignored: the log only
/// feeds a summary).
fn append(log: &std::path::Path, test: &str, why: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = file.write_all(format!("{test}\t{why}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_are_appended_one_line_each() {
        let log = std::env::temp_dir().join(format!("aotune-skip-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        super::append(&log, "a", "no widget");
        super::append(&log, "b", "no gadget");
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(text, "a\tno widget\nb\tno gadget\n");
    }
}
