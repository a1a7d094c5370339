//! The kit's MariaDB handling, against a real server.

use std::path::Path;
use std::time::Instant;

use fencelock_testkit::MariaDb;

#[test]
fn starts_answers_and_drops_cleanly() {
    let started = Instant::now();
    let db = MariaDb::start().unwrap();
    eprintln!("mariadb started in {:?}", started.elapsed());
    assert_eq!(
        db.url(),
        format!("mysql://root@127.0.0.1:{}/test", db.port())
    );
    assert_eq!(db.sql("select 1").unwrap(), "1");
    assert!(db.sql("select nonsense_column").is_err());
    db.sql("create table test.t (v int); insert into test.t values (7)")
        .unwrap();
    assert_eq!(db.sql("select v from test.t").unwrap(), "7");
    let pid = db.pid().unwrap();
    drop(db);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}
