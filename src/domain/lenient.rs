//! Integers as the clients send them: the SDKs send numbers, the Azure CLI sends some as strings
//! ("1"); the service takes both, and so does this one.

use serde::{Deserialize, Deserializer};

#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(i64),
    Text(String),
}

pub fn opt_i32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    let value: Option<NumberOrText> = Option::deserialize(d)?;
    let n = match value {
        None => return Ok(None),
        Some(NumberOrText::Number(n)) => n,
        Some(NumberOrText::Text(t)) => t
            .trim()
            .parse::<i64>()
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not a whole number")))?,
    };
    i32::try_from(n)
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("{n} is out of range")))
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct T {
        #[serde(default, deserialize_with = "super::opt_i32")]
        n: Option<i32>,
    }

    #[test]
    fn numbers_and_numeric_strings() {
        let parse = |s: &str| serde_json::from_str::<T>(s).map(|t| t.n);
        assert_eq!(parse(r#"{"n": 3}"#).unwrap(), Some(3));
        assert_eq!(parse(r#"{"n": "3"}"#).unwrap(), Some(3));
        assert_eq!(parse(r#"{}"#).unwrap(), None);
        assert_eq!(parse(r#"{"n": null}"#).unwrap(), None);
        assert!(parse(r#"{"n": "three"}"#).is_err());
        assert!(parse(r#"{"n": 99999999999}"#).is_err());
    }
}
