//! Locking without the poison ceremony.
//!
//! Release builds abort on panic (`panic = "abort"`), so a poisoned lock cannot be observed
//! there. In test builds a poisoned lock means another thread panicked while holding it —
//! already a failed test — and every structure we guard stays valid between statements
//! (no invariant spans an `.await` or a call that can panic halfway). So the data is used
//! as is instead of turning one failure into a cascade of unrelated panics.

use std::sync::{Mutex, MutexGuard};

/// [`Mutex::lock`] that takes the data back from a poisoned lock (see the module docs).
pub trait LockPlain<T: ?Sized> {
    /// Locks, ignoring poison.
    fn lock_plain(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockPlain<T> for Mutex<T> {
    fn lock_plain(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = std::sync::Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let panicked = std::thread::spawn(move || {
            let _held = m2.lock_plain();
            panic!("poison it");
        })
        .join();
        assert!(panicked.is_err());
        assert!(m.is_poisoned());
        *m.lock_plain() += 1;
        assert_eq!(*m.lock_plain(), 6);
    }
}
