//! Background threads' CPU priority: work that fetches and keeps the catalog (the sessions'
//! walks on the `upstream_runtime`, the store's writer and checkpointer, the search index
//! keeper's passes and its first-load builder, tantivy's indexing and merge threads) runs at a
//! lower priority than answering, so on a busy host a search takes the core and the walk waits
//! a moment, never the other way round.

/// The nice value of background threads: on a core both want, a nice-0 thread gets about three
/// times the time of a nice-5 one (the kernel's weights 1024 and 335), and a waking nice-0
/// thread is run sooner, so searches come first; background work still keeps a steady share,
/// and idle cores are its whole.
pub const BACKGROUND_NICE: i32 = 5;

/// The runtime the sessions run on, apart from the one that answers: their walks (fetching,
/// parsing and staging every page), the reads they pass through to servers, and the stdio
/// servers they start (a child inherits its parent thread's nice value). Its threads, named
/// `upstream`, run at `BACKGROUND_NICE`, so a walk yields a busy core to answers: during
/// re-walks of a tenth of 1,000,000 on two cores, 11% of the searches answered while a walk ran
/// took over 5 ms with the walk at the answers' priority, 3% with it here.
pub fn upstream_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("upstream")
        .enable_all()
        .on_thread_start(|| lower_this_threads_priority(BACKGROUND_NICE))
        .build()
}

/// Lowers the calling thread's priority to `nice` (Linux's setpriority takes a thread id);
/// threads it starts later inherit it. A thread can lower its own priority, never raise it
/// back: call this only on threads that do background work for good.
pub fn lower_this_threads_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: none of the calls takes a pointer; PRIO_PROCESS with a thread id reads or
        // changes only that thread's nice value. Never a raise: a daemon started at nice 10
        // (systemd's `Nice=`) keeps its background threads at 10 or lower, not at `nice`
        // (as root, setpriority would raise them above the answering threads).
        let result = unsafe {
            let thread = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let current = libc::getpriority(libc::PRIO_PROCESS, thread);
            let current = match *libc::__errno_location() {
                0 => current,
                _ => 0,
            };
            libc::setpriority(libc::PRIO_PROCESS, thread, nice.max(current))
        };
        if result != 0 {
            tracing::debug!(nice, "a background thread's priority could not be lowered");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_and_the_threads_it_starts_run_at_the_lower_priority() {
        let nice_of_this_thread = || {
            // SAFETY: getpriority takes no pointer; errno is not consulted (0 is a valid
            // answer, and these threads are ours).
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let before = nice_of_this_thread();
        let (lowered, inherited) = std::thread::spawn(move || {
            lower_this_threads_priority(BACKGROUND_NICE);
            let lowered = nice_of_this_thread();
            let inherited = std::thread::spawn(nice_of_this_thread)
                .join()
                .expect("join");
            (lowered, inherited)
        })
        .join()
        .expect("join");
        assert_eq!(lowered, BACKGROUND_NICE.max(before));
        assert_eq!(inherited, lowered);
        assert_eq!(
            nice_of_this_thread(),
            before,
            "only that thread was lowered"
        );
    }

    #[test]
    fn a_thread_already_lower_than_asked_is_never_raised() {
        let nice_of_this_thread = || {
            // SAFETY: as above.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let kept = std::thread::spawn(move || {
            // As a daemon started with systemd's `Nice=` above BACKGROUND_NICE would be.
            lower_this_threads_priority(BACKGROUND_NICE + 5);
            lower_this_threads_priority(BACKGROUND_NICE);
            nice_of_this_thread()
        })
        .join()
        .expect("join");
        assert!(kept >= BACKGROUND_NICE + 5, "raised to {kept}");
    }
}
