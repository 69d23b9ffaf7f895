//! Building the short strings backends send on every call (keys, stored values) in
//! one string, where `format!` would make a string of its own for each piece.

/// Appends `n` in decimal to `out`.
///
/// ```
/// let mut value = String::from("owner:");
/// lock_core::backend::push_decimal(&mut value, 1_234);
/// assert_eq!(value, "owner:1234");
/// ```
pub fn push_decimal(out: &mut String, mut n: u64) {
    // Digits written from the end of a buffer on the stack: the formatting machinery
    // costs several times as much for a number, and every lock cycle writes a few.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[start..].iter().map(|&digit| char::from(digit)));
}

/// Appends `bytes` in lowercase hex to `out`.
///
/// ```
/// let mut key = String::from("lock_");
/// lock_core::backend::push_hex(&mut key, &[0x0f, 0xa0]);
/// assert_eq!(key, "lock_0fa0");
/// ```
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
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
