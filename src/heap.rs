//! The daemon's allocators: jemalloc for everything Rust allocates, glibc's malloc for SQLite.
//!
//! The binary sets jemalloc as its global allocator with `JEMALLOC_OPTIONS`
//! (`use_daemon_allocator!`), and so does the benchmark harness, whose bare loop and index
//! costs run the daemon's code in its own process.
//! A first sync moves every row between threads: the walk parses a page, the writer stores it,
//! the index's builder indexes it and frees it. glibc's malloc locks the heap a block came from
//! to free it in another thread, and `perf` of a first sync found many of the daemon's samples
//! in those locks' futexes. jemalloc frees into the freeing thread's cache and hands blocks back
//! to their arena in batches: the first sync is shorter and the peak and rest memory lower,
//! side by side (BENCHMARKS.md, "first sync").
//!
//! SQLite's own allocations (bundled, calling `malloc`) stay on glibc's heap, bounded by the
//! binary at start (`bound_sqlite_heap`): large blocks mapped for themselves, few arenas, little
//! kept free at their tops.

/// jemalloc's options, read at the first allocation (the environment's `_RJEM_MALLOC_CONF`
/// overrides them):
/// - `background_thread`: a thread of jemalloc's own gives freed pages back on time, also
///   while the daemon is idle (otherwise only allocations move the clock, and an idle daemon
///   would keep its peak);
/// - `dirty_decay_ms:1000`, `muzzy_decay_ms:0`: pages freed go back to the kernel within about
///   a second, and at once out of the resident set (`MADV_DONTNEED`, not `MADV_FREE`, whose
///   pages count as resident until the kernel wants them). A second keeps the 4 MiB term table
///   of each search index commit paged in from one commit to the next in a burst;
/// - `narenas:2`: two arenas, whatever the core count (jemalloc's default is four per core):
///   every arena keeps pages of its own, and the daemon's few busy threads meet in an arena
///   for a small block only when their thread caches fill or empty (blocks over 32 KiB go to
///   the arena each time);
/// - `thp:never`: no transparent huge pages, whose 2 MiB pages stay resident for a few bytes
///   used in each (the mimalloc trial's peak, BENCHMARKS.md).
pub const JEMALLOC_OPTIONS: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2,thp:never\0";

pub use tikv_jemallocator::Jemalloc;

/// Makes jemalloc, with `JEMALLOC_OPTIONS`, the global allocator of the program that calls it
/// (once, at the top of its `main.rs`): the daemon's binary, and the benchmarks that measure
/// the daemon's code in their own process. jemalloc reads its options from `_rjem_malloc_conf`
/// (its symbols carry the `_rjem_` prefix).
#[macro_export]
macro_rules! use_daemon_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::heap::Jemalloc = $crate::heap::Jemalloc;

        #[allow(non_upper_case_globals)]
        #[export_name = "_rjem_malloc_conf"]
        pub static malloc_conf: &[u8] = $crate::heap::JEMALLOC_OPTIONS;
    };
}

/// SQLite's heap (glibc's malloc): blocks of 1 MiB and more (a large entry's text read or
/// written) are mapped for themselves and unmapped when freed, where glibc's default would
/// raise that threshold after each large free, up to 32 MiB, and keep such blocks; SQLite's
/// threads (the writer, the readers, the index's sources) share at most `SQLITE_ARENAS` heaps,
/// not eight per core each keeping what its threads freed; and at most 1 MiB is kept free at
/// the top of each. Called before any thread exists.
pub fn bound_sqlite_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_ARENA_MAX, SQLITE_ARENAS);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// The most heaps (glibc arenas) SQLite's threads share.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const SQLITE_ARENAS: i32 = 4;

#[cfg(test)]
mod tests {
    #[test]
    fn jemalloc_options_are_one_c_string() {
        let options = super::JEMALLOC_OPTIONS;
        assert_eq!(options.last(), Some(&0));
        assert_eq!(options.iter().filter(|byte| **byte == 0).count(), 1);
        let text = std::str::from_utf8(&options[..options.len() - 1]).unwrap();
        for option in text.split(',') {
            assert!(option.split_once(':').is_some(), "{option}");
        }
    }
}
