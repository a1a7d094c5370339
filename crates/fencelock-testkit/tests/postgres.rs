//! The kit's PostgreSQL handling, against a real server.

use std::path::Path;
use std::time::Instant;

use fencelock_testkit::Postgres;

#[test]
fn starts_answers_restarts_and_drops_cleanly() {
    let started = Instant::now();
    let pg = Postgres::start().unwrap();
    eprintln!("postgres started in {:?}", started.elapsed());
    assert_eq!(
        pg.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port())
    );
    assert!(pg.conn_str().contains(&format!("port={}", pg.port())));
    assert_eq!(pg.psql("select 1").unwrap(), "1");
    assert!(pg.psql("select nonsense_column").is_err());

    pg.psql("create table t (v int); insert into t values (7)")
        .unwrap();
    pg.kill().unwrap();
    assert!(!pg.is_running());
    pg.restart().unwrap();
    assert_eq!(pg.psql("select v from t").unwrap(), "7");

    let pid = pg.pid().unwrap();
    drop(pg);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}
