//! A database file in a directory that does not exist is a configuration error (retrying
//! cannot help), named with the directory; nothing is created.
#![allow(clippy::expect_used)]

use backstop_core::ErrorKind;
use backstop_sqlite::SqliteStore;

#[tokio::test]
async fn a_missing_directory_is_a_permanent_error_that_names_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let missing = tmp.path().join("no_such_dir");
    let Err(e) = SqliteStore::open(missing.join("tasks.db")).await else {
        panic!("opening in a missing directory must fail");
    };
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(!e.is_temporary());
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "names the directory: {e}"
    );
    assert!(!missing.exists(), "nothing created");
    // a bare file name (current directory) and an existing directory still open
    let store = SqliteStore::open(tmp.path().join("tasks.db"))
        .await
        .expect("an existing directory opens");
    drop(store);
}
