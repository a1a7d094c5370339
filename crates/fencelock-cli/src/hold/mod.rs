//! What a command holds while its command runs: the exclusive lock, a shared (read) lock, a
//! permit of a semaphore, or the leadership of an election.

pub(crate) mod permit;
pub(crate) mod shared;
