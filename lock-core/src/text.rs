//! Building the short strings backends send on every call (keys, stored values) in
//! one string, where `format!` would make a string of its own for each piece.

/// Appends `n` in decimal to `out`.
///
/// ```
/// let mut value = String::from("owner:");
/// lock_core::backend::push_decimal(&mut value, 1_234);
/// assert_eq!(value, "owner:1234");
/// ```
pub fn push_decimal(out: &mut String, n: u64) {
    use std::fmt::Write;
    // Writing into the caller's string allocates nothing beyond its growth.
    let _ = write!(out, "{n}");
}

#[cfg(test)]
mod tests {
    use super::push_decimal;

    #[test]
    fn writes_what_display_writes() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            1_234_567,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }
}
