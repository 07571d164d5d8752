//! Kubernetes resource quantities (`25Gi`, `500M`, `1.5Ti`, `1e9`) as a number of bytes,
//! for the storage settings `check-config` compares (spec 8). The grammar is Kubernetes'
//! (`k8s.io/apimachinery/pkg/api/resource`): a non-negative decimal number and one suffix,
//! binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`, `k`, `M` … `E`) or an exponent (`e3`,
//! `E3`). A fractional byte count is rounded up, as Kubernetes rounds up.

/// `value` in bytes, or why it is not a quantity.
pub fn parse_bytes(value: &str) -> Result<u128, String> {
    let not_a_quantity = || {
        format!(
            "{value:?} is not a Kubernetes quantity (e.g. 25Gi, 500Mi, 100G or a number of bytes)"
        )
    };
    let number_end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(not_a_quantity());
    }
    // The number as an integer of all its digits, scaled down by `fraction.len()` places.
    let digits = format!("{whole}{fraction}");
    let mantissa: u128 = digits.parse().map_err(|_| not_a_quantity())?;
    let (base, exponent): (u128, i64) = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        exponent => {
            let digits = exponent
                .strip_prefix(['e', 'E'])
                .ok_or_else(not_a_quantity)?;
            let (sign, digits) = match digits.strip_prefix(['+', '-']) {
                Some(rest) => (if digits.starts_with('-') { -1 } else { 1 }, rest),
                None => (1, digits),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(not_a_quantity());
            }
            let exponent: i64 = digits.parse().map_err(|_| not_a_quantity())?;
            (10, sign * exponent)
        }
    };
    let too_large = || format!("{value:?} is too large");
    let mut numerator = mantissa;
    let mut denominator: u128 = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    let power = base
        .checked_pow(u32::try_from(exponent.unsigned_abs()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    if exponent >= 0 {
        numerator = numerator.checked_mul(power).ok_or_else(too_large)?;
    } else {
        denominator = denominator.checked_mul(power).ok_or_else(too_large)?;
    }
    Ok(numerator.div_ceil(denominator))
}

/// `bytes` for a person: in the largest binary unit not above it, exactly when it divides,
/// else approximately with the exact number of bytes.
pub fn format_bytes(bytes: u128) -> String {
    const UNITS: [(&str, u128); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    let Some((unit, size)) = UNITS.into_iter().find(|(_, size)| bytes >= *size) else {
        return bytes.to_string();
    };
    if bytes.is_multiple_of(size) {
        return format!("{}{unit}", bytes / size);
    }
    let hundredths = bytes % size * 100 / size;
    format!("~{}.{hundredths:02}{unit} ({bytes} bytes)", bytes / size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_and_plain_quantities_are_bytes() {
        for (quantity, bytes) in [
            ("0", 0),
            ("1024", 1024),
            ("1Ki", 1024),
            ("25Gi", 25 << 30),
            ("1.5Gi", 3 << 29),
            ("2Ti", 2 << 40),
            ("3Mi", 3 << 20),
            ("1k", 1_000),
            ("100M", 100_000_000),
            ("20G", 20_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1e9", 1_000_000_000),
            ("1E3", 1_000),
            ("1.5", 2),
            ("1500m", 2),
            (".5Ki", 512),
        ] {
            assert_eq!(parse_bytes(quantity), Ok(bytes), "{quantity}");
        }
    }

    #[test]
    fn what_is_not_a_quantity_is_refused() {
        for quantity in [
            "", "Gi", "25 Gi", "25gb", "25GB", "-1Gi", "1.2.3", "25Gi ", "1e", "1ex", "0x10",
        ] {
            let err = parse_bytes(quantity).err().unwrap_or_default();
            assert!(
                err.contains("not a Kubernetes quantity"),
                "{quantity:?}: {err}"
            );
        }
        assert!(parse_bytes("1e99").is_err());
    }

    #[test]
    fn bytes_are_shown_in_the_largest_unit() {
        assert_eq!(format_bytes(75 << 30), "75Gi");
        assert_eq!(format_bytes(2 << 40), "2Ti");
        assert_eq!(format_bytes(512 << 20), "512Mi");
        assert_eq!(format_bytes(1536 << 20), "~1.50Gi (1610612736 bytes)");
        assert_eq!(
            format_bytes(100_000_000_000),
            "~93.13Gi (100000000000 bytes)"
        );
        assert_eq!(format_bytes(1000), "1000");
    }
}
