//! Building the short strings backends send on every call (keys, stored values)
//! without the formatting machinery, which grows a string more than once.

/// Appends `n` in decimal to `out`.
///
/// ```
/// let mut value = String::from("owner:");
/// lock_core::backend::push_decimal(&mut value, 1_234);
/// assert_eq!(value, "owner:1234");
/// ```
pub fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = n;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[start..].iter().map(|&d| char::from(d)));
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
