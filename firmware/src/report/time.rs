//! Times as the report prints them.

/// Unix milliseconds as `2026-12-06 18:40:12 UTC` (the appliance's clock; reports are
/// read elsewhere, so no local zone).
pub fn utc(ms: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{ms} ms"),
    }
}

/// `ms` after the start as `+12.3 s`.
pub fn offset(ms: i64, start: i64) -> String {
    format!("+{:.1} s", (ms - start).max(0) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_milliseconds_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_582_412_345), "2026-12-06 18:40:12 UTC");
        assert_eq!(offset(12_345, 0), "+12.3 s");
        assert_eq!(offset(0, 5), "+0.0 s");
    }
}
