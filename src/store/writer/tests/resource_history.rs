//! Resource history written set-based by a swap (`history::record_pending`): flip-flops,
//! removals and re-adds, pruning at a lowered bound, the accepted version kept.

use super::*;

/// A resource's kept versions, oldest first: (digest, body id, first seen, last seen).
fn versions_of(connection: &Connection, uri: &str) -> Vec<(String, i64, i64, Option<i64>)> {
    let mut statement = connection
        .prepare(
            "SELECT digest, body_id, first_seen, last_seen FROM history_versions
             WHERE kind = ?1 AND key = ?2 ORDER BY id",
        )
        .expect("prepare");
    let rows = statement
        .query_map(params![Kind::Resource, uri], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .expect("query");
    rows.collect::<Result<_, _>>().expect("rows")
}

/// A swap records its resource versions set-based (`history::record_pending`): in one swap,
/// entries flip back to an old body (its body row reused), one is removed and one added; a
/// later swap re-adds the removed one with an old body, and one at a lowered bound prunes
/// each entry to its newest versions, never the accepted one, keeping a body a new version
/// points at again. Digests are `body_digest`'s (XXH3-128 of the text, in SQL).
#[test]
fn a_set_based_swap_records_flip_flops_removals_and_prunes_as_the_hooks_did() {
    let directory = tempfile::tempdir().expect("tempdir");
    let connection = &mut writer_connection(&directory.path().join("catalog.db"), &["h"]);
    connection
        .execute(
            "UPDATE servers SET history_resources = 1 WHERE name = 'h'",
            [],
        )
        .expect("history on");
    let behind = AtomicU64::new(0);
    let pause = || std::thread::sleep(Duration::from_millis(3));
    let alpha = resources("h", 0..5, "alpha");
    let beta = resources("h", 0..5, "beta");
    let uri = |index: usize| alpha[index].uri.clone();
    let digest =
        |row: &ResourceRow| format!("{:032x}", xxhash_rust::xxh3::xxh3_128(row.raw.as_bytes()));
    walk(connection, 1, "h", &alpha, &behind);
    pause();
    // Every row changed: each gets its old text seeded (when the first load recorded none),
    // then its new one.
    walk(connection, 2, "h", &beta, &behind);
    pause();
    // Rows 0 and 1 flip back, 2 and 3 stay, 4 is removed, 5 is added.
    let third = vec![
        alpha[0].clone(),
        alpha[1].clone(),
        beta[2].clone(),
        beta[3].clone(),
        resource("h", 5, "alpha"),
    ];
    let outcome = walk(connection, 3, "h", &third, &behind);
    assert_eq!((outcome.added, outcome.removed, outcome.changed), (1, 1, 2));
    pause();
    let mut fourth = third.clone();
    fourth.push(alpha[4].clone());
    assert_eq!(walk(connection, 4, "h", &fourth, &behind).added, 1);

    for index in [0, 1] {
        let versions = versions_of(connection, &uri(index));
        let digests: Vec<&str> = versions.iter().map(|v| v.0.as_str()).collect();
        assert_eq!(
            digests,
            [
                digest(&alpha[index]),
                digest(&beta[index]),
                digest(&alpha[index])
            ],
            "{versions:?}"
        );
        // The flip-flop points at the body kept for the first version.
        assert_eq!(versions[2].1, versions[0].1);
        assert_ne!(versions[1].1, versions[0].1);
        // Each version closed when the next one was first seen; the newest is open.
        assert_eq!(versions[0].3, Some(versions[1].2));
        assert_eq!(versions[1].3, Some(versions[2].2));
        assert_eq!(versions[2].3, None);
        assert!(versions[1].2 < versions[2].2);
    }
    let unchanged = versions_of(connection, &uri(2));
    assert_eq!(unchanged.len(), 2, "{unchanged:?}");
    assert_eq!(unchanged[1].0, digest(&beta[2]));
    assert_eq!(unchanged[1].3, None);
    // Removed at the third swap, re-added with its first text at the fourth.
    let readded = versions_of(connection, &uri(4));
    assert_eq!(readded.len(), 3, "{readded:?}");
    assert_eq!(readded[2].0, digest(&alpha[4]));
    assert_eq!(readded[2].1, readded[0].1);
    assert_eq!(readded[1].3, Some(versions_of(connection, &uri(0))[2].2));
    assert!(readded[1].3 < Some(readded[2].2));
    assert_eq!(readded[2].3, None);
    let added = versions_of(connection, &resource("h", 5, "alpha").uri);
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].0, digest(&resource("h", 5, "alpha")));
    // Bodies are the texts, sized in bytes, and their total is kept.
    let (body, bytes): (String, i64) = connection
        .query_row(
            "SELECT body, bytes FROM history_bodies WHERE id = ?1",
            [versions_of(connection, &uri(0))[0].1],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("body");
    assert_eq!(
        (body.as_str(), bytes),
        (alpha[0].raw.as_str(), alpha[0].raw.len() as i64)
    );
    let (total, summed): (i64, i64) = connection
        .query_row(
            "SELECT total_bytes, (SELECT sum(bytes) FROM history_bodies) FROM history_settings",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("total");
    assert_eq!(total, summed);

    // Row 1's first text is accepted; at two versions a key, every row flips to beta again.
    connection
        .execute(
            "INSERT INTO accepted_entries (server_id, kind, name, raw, accepted_at)
             VALUES ((SELECT id FROM servers WHERE name = 'h'), ?1, ?2, ?3, 0)",
            params![Kind::Resource, uri(1), alpha[1].raw],
        )
        .expect("accept");
    connection
        .execute("UPDATE history_settings SET versions_per_key = 2", [])
        .expect("bound");
    let before = versions_of(connection, &uri(0));
    pause();
    let mut fifth = fourth.clone();
    fifth[0] = beta[0].clone();
    fifth[1] = beta[1].clone();
    assert_eq!(walk(connection, 5, "h", &fifth, &behind).changed, 2);
    let pruned = versions_of(connection, &uri(0));
    assert_eq!(pruned.len(), 2, "{pruned:?}");
    assert_eq!(
        pruned[0],
        (before[2].0.clone(), before[2].1, before[2].2, pruned[0].3)
    );
    assert!(pruned[0].3.is_some());
    // The new version reuses the body of the pruned one of the same text, which stays.
    assert_eq!(pruned[1].0, digest(&beta[0]));
    assert_eq!(pruned[1].1, before[1].1);
    let body_kept: bool = connection
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM history_bodies WHERE id = ?1)",
            [before[1].1],
            |row| row.get(0),
        )
        .expect("body kept");
    assert!(body_kept);
    // The accepted version stays beyond the bound.
    let accepted = versions_of(connection, &uri(1));
    let digests: Vec<&str> = accepted.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(
        digests,
        [digest(&alpha[1]), digest(&alpha[1]), digest(&beta[1])],
        "{accepted:?}"
    );
}
