//! The daemon's allocator: the system's (glibc's malloc), keeping the last few large blocks
//! freed for the next allocation of the same size.
//!
//! The daemon has glibc map every block of 1 MiB and more for itself and unmap it when it is
//! freed (`M_MMAP_THRESHOLD`, set by the binary), so large buffers never stay in the heap.
//! The search index's commits pay for that: each one, however small, starts a tantivy
//! segment writer whose term table is a 4 MiB block (2^19 slots, whatever the budget: tantivy
//! needs 15 MB at least), written whole when it is made, so every commit mapped 4 MiB afresh,
//! took a page fault for each of its 1,024 pages and unmapped it again. A block of
//! `SMALLEST_KEPT` to `LARGEST_KEPT` bytes freed is kept instead (at most `KEPT_BYTES` of
//! them, the oldest given back first) and handed to the next allocation of exactly its size
//! that does not ask for zeroed memory: already mapped and paged in. Zeroed allocations (the
//! segment writer's 1 MiB arena pages among them) still get fresh pages, which the kernel
//! zeroes only as they are touched. What this keeps is bounded: `KEPT_BYTES`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

/// The smallest block kept: below it glibc's heap serves and reuses blocks itself (up to the
/// 1 MiB mapping threshold), and the 1 MiB arena pages are allocated zeroed.
pub const SMALLEST_KEPT: usize = 2 << 20;
/// The largest block kept: the term table's 4 MiB. With 8 MiB kept (2-8 MiB blocks) and 4 MiB
/// free at each heap's top, a first sync of 1,000,000 resources peaked at 160.1 MB against 150
/// (`bench walk --size=1000000`, 2026-12-06); 4 MiB here and 1 MiB at each of the 4 heap tops
/// keep up to 16 MiB less (141.9 MB in the same benchmark).
pub const LARGEST_KEPT: usize = 4 << 20;
/// The most bytes kept at once.
pub const KEPT_BYTES: usize = 4 << 20;
/// The most blocks kept at once.
const KEPT_BLOCKS: usize = 4;
/// Blocks of no larger alignment than glibc's malloc gives are kept.
const MALLOC_ALIGN: usize = 16;

/// A kept block: its address and size (0 for an empty slot), and when it was kept.
#[derive(Clone, Copy)]
struct Block {
    address: usize,
    size: usize,
    kept_at: u64,
}

const EMPTY: Block = Block {
    address: 0,
    size: 0,
    kept_at: 0,
};

struct Kept {
    blocks: [Block; KEPT_BLOCKS],
    bytes: usize,
    clock: u64,
}

/// The global allocator of the daemon's binary.
pub struct ReusingAllocator {
    kept: Mutex<Kept>,
}

impl ReusingAllocator {
    pub const fn new() -> ReusingAllocator {
        ReusingAllocator {
            kept: Mutex::new(Kept {
                blocks: [EMPTY; KEPT_BLOCKS],
                bytes: 0,
                clock: 0,
            }),
        }
    }

    fn keeps(layout: Layout) -> bool {
        (SMALLEST_KEPT..=LARGEST_KEPT).contains(&layout.size()) && layout.align() <= MALLOC_ALIGN
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A kept block of exactly `size` bytes, taken out.
    fn take(&self, size: usize) -> Option<*mut u8> {
        let mut kept = self.kept();
        let slot = kept.blocks.iter().position(|block| block.size == size)?;
        let block = std::mem::replace(&mut kept.blocks[slot], EMPTY);
        kept.bytes -= block.size;
        Some(block.address as *mut u8)
    }

    /// Keeps the block at `address`, giving back the oldest kept blocks to make room; the
    /// blocks to give back are returned (freed by the caller, outside the lock).
    fn keep(&self, address: *mut u8, size: usize) -> [Block; KEPT_BLOCKS] {
        let mut given_back = [EMPTY; KEPT_BLOCKS];
        let mut kept = self.kept();
        let mut returned = 0;
        while kept.bytes + size > KEPT_BYTES || kept.blocks.iter().all(|block| block.size != 0) {
            let Some(oldest) = kept
                .blocks
                .iter()
                .enumerate()
                .filter(|(_, block)| block.size != 0)
                .min_by_key(|(_, block)| block.kept_at)
                .map(|(slot, _)| slot)
            else {
                break;
            };
            let block = std::mem::replace(&mut kept.blocks[oldest], EMPTY);
            kept.bytes -= block.size;
            given_back[returned] = block;
            returned += 1;
        }
        kept.clock += 1;
        let kept_at = kept.clock;
        if let Some(slot) = kept.blocks.iter().position(|block| block.size == 0) {
            kept.blocks[slot] = Block {
                address: address as usize,
                size,
                kept_at,
            };
            kept.bytes += size;
        }
        given_back
    }

    /// How many blocks and bytes are kept now.
    pub fn kept_now(&self) -> (usize, usize) {
        let kept = self.kept();
        let blocks = kept.blocks.iter().filter(|block| block.size != 0).count();
        (blocks, kept.bytes)
    }
}

impl Default for ReusingAllocator {
    fn default() -> Self {
        ReusingAllocator::new()
    }
}

// SAFETY: every block handed out is one the system allocator made (a kept block was made by
// `System::alloc` with a layout of the same size and an alignment it gives every block), and
// every block freed goes back to it, at once or when it leaves the kept set.
unsafe impl GlobalAlloc for ReusingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::keeps(layout) {
            if let Some(address) = self.take(layout.size()) {
                return address;
            }
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, address: *mut u8, layout: Layout) {
        if !Self::keeps(layout) {
            return System.dealloc(address, layout);
        }
        for block in self.keep(address, layout.size()) {
            if block.size != 0 {
                let layout = Layout::from_size_align_unchecked(block.size, MALLOC_ALIGN);
                System.dealloc(block.address as *mut u8, layout);
            }
        }
    }

    unsafe fn realloc(&self, address: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        System.realloc(address, layout, new_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn a_large_block_freed_is_handed_to_the_next_allocation_of_its_size() {
        let allocator = ReusingAllocator::new();
        unsafe {
            let first = allocator.alloc(layout(4 << 20));
            first.write_bytes(7, 4 << 20);
            allocator.dealloc(first, layout(4 << 20));
            assert_eq!(allocator.kept_now(), (1, 4 << 20));
            // Another size, or a zeroed allocation, does not take it.
            let other = allocator.alloc(layout(3 << 20));
            let zeroed = allocator.alloc_zeroed(layout(4 << 20));
            assert!(other != first && zeroed != first);
            assert_eq!(*zeroed.add(4096), 0);
            let again = allocator.alloc(layout(4 << 20));
            assert_eq!(again, first);
            assert_eq!(allocator.kept_now(), (0, 0));
            allocator.dealloc(other, layout(3 << 20));
            allocator.dealloc(again, layout(4 << 20));
            // 3 MiB kept, then the 4 MiB block gives back the oldest (the 3 MiB one) to fit.
            assert_eq!(allocator.kept_now(), (1, 4 << 20));
            allocator.dealloc(zeroed, layout(4 << 20));
            assert_eq!(allocator.kept_now(), (1, 4 << 20));
        }
    }

    #[test]
    fn small_huge_and_overaligned_blocks_are_not_kept() {
        let allocator = ReusingAllocator::new();
        unsafe {
            for layout in [
                layout(1 << 20),
                layout(LARGEST_KEPT + 1),
                Layout::from_size_align(4 << 20, 4096).unwrap(),
            ] {
                let block = allocator.alloc(layout);
                allocator.dealloc(block, layout);
            }
            assert_eq!(allocator.kept_now(), (0, 0));
        }
    }

    #[test]
    fn what_is_kept_stays_within_its_bounds() {
        let allocator = ReusingAllocator::new();
        unsafe {
            let blocks: Vec<*mut u8> = (0..6).map(|_| allocator.alloc(layout(2 << 20))).collect();
            for block in blocks {
                allocator.dealloc(block, layout(2 << 20));
                let (count, bytes) = allocator.kept_now();
                assert!(count <= KEPT_BLOCKS && bytes <= KEPT_BYTES);
            }
            assert_eq!(allocator.kept_now(), (2, 4 << 20));
        }
    }
}
