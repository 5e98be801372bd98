//! Tests of the merged catalog's pages: the winners are the merged view's, the cursor pages
//! through everything, and a page costs SQLite a bounded number of steps wherever it starts.

use rusqlite::Connection;

use super::queries::{merged_page, MERGED_RESOURCES};

const LISTINGS: usize = 3000;
const LIMIT: usize = 100;

/// Servers `a` and `b` at priority 100 and `c` at 50: `a` lists every URI, `b` every 10th (it
/// loses them to `a`, the lower name), `c` every 100th (it wins them, the lower priority) and
/// some of its own, between the others.
fn catalog() -> Connection {
    let mut connection = Connection::open_in_memory().expect("open");
    crate::store::schema::migrate(std::path::Path::new(":memory:"), &mut connection)
        .expect("migrate");
    connection
        .execute_batch(&format!(
            "INSERT INTO servers (id, name, priority) VALUES (1, 'b', 100), (2, 'a', 100), (3, 'c', 50);
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last})
             INSERT INTO resources (server_id, uri, name, raw)
             SELECT 2, printf('file:///%05d', i), 'a', '{{\"from\":\"a\"}}' FROM n
             UNION ALL SELECT 1, printf('file:///%05d', i), 'b', '{{\"from\":\"b\"}}' FROM n WHERE i % 10 = 0
             UNION ALL SELECT 3, printf('file:///%05d', i), 'c', '{{\"from\":\"c\"}}' FROM n WHERE i % 100 = 0
             UNION ALL SELECT 3, printf('file:///%05d-own', i), 'c', '{{\"from\":\"c\"}}' FROM n WHERE i % 7 = 0;
             ANALYZE;",
            last = LISTINGS - 1
        ))
        .expect("fill");
    connection
}

/// The merged view as the rules state it, one correlated subquery per listing (slow, plain).
fn expected(connection: &Connection) -> Vec<(String, String)> {
    let mut statement = connection
        .prepare(
            "SELECT r.uri, s.name FROM resources r JOIN servers s ON s.id = r.server_id
             WHERE NOT EXISTS (
                 SELECT 1 FROM resources r2 JOIN servers s2 ON s2.id = r2.server_id
                 WHERE r2.uri = r.uri AND r2.server_id != r.server_id
                   AND (s2.priority < s.priority OR (s2.priority = s.priority AND s2.name < s.name)))
             ORDER BY r.uri",
        )
        .expect("prepare");
    let rows = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query");
    rows.collect::<Result<_, _>>().expect("rows")
}

#[test]
fn pages_show_each_uri_once_from_its_winner() {
    let connection = catalog();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = merged_page(
            &connection,
            MERGED_RESOURCES,
            after.as_deref(),
            LIMIT,
            &|_| true,
        )
        .expect("page");
        for row in &page.rows {
            assert_eq!(row.raw, format!("{{\"from\":\"{}\"}}", row.server));
            seen.push((row.key.clone(), row.server.clone()));
        }
        if !page.more {
            break;
        }
        assert_eq!(page.rows.len(), LIMIT);
        after = page.rows.last().map(|row| row.key.clone());
    }
    let expected = expected(&connection);
    assert!(
        expected.len() > LISTINGS,
        "the catalog has c's own URIs too"
    );
    assert_eq!(seen, expected);
    // A page that ends exactly at the last URI says nothing more follows.
    let all = merged_page(&connection, MERGED_RESOURCES, None, expected.len(), &|_| {
        true
    })
    .expect("page");
    assert_eq!((all.rows.len(), all.more), (expected.len(), false));
    let short = merged_page(
        &connection,
        MERGED_RESOURCES,
        None,
        expected.len() - 1,
        &|_| true,
    )
    .expect("page");
    assert_eq!((short.rows.len(), short.more), (expected.len() - 1, true));
}

/// The plan: the URI index walked from the cursor, no sort, a bounded number of virtual
/// machine steps per listing read (about 8 today; a correlated subquery per row adds more), the same near the end of the catalog as at its start. A
/// plan that sorts, scans from the start, or runs a subquery per row fails this.
#[test]
fn a_page_costs_the_same_bounded_steps_wherever_it_starts() {
    let connection = catalog();
    let starts = ["", "file:///01500", "file:///02800"];
    let mut steps = Vec::new();
    for start in starts {
        let page = merged_page(&connection, MERGED_RESOURCES, Some(start), LIMIT, &|_| true)
            .expect("page");
        assert_eq!(page.rows.len(), LIMIT);
        assert_eq!(page.sorts, 0, "a page must not sort");
        // Listings read: the page's, the URIs listed twice or three times, and the next URI.
        let read = LIMIT + 30;
        assert!(
            page.vm_steps as usize <= 12 * read,
            "{} steps for a page after {start:?}",
            page.vm_steps
        );
        steps.push(page.vm_steps);
    }
    let (least, most) = (
        steps.iter().min().copied().unwrap_or(0),
        steps.iter().max().copied().unwrap_or(0),
    );
    assert!(
        most as f64 <= least as f64 * 1.5,
        "a page's cost must not grow with its position: {steps:?}"
    );
}
