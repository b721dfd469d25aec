//! The values of labels (pure): how booleans and counts are read, and why
//! a label set is refused. Shared by [`super::labels`] and
//! [`super::infra_labels`].

/// Why a label set cannot be used (the create fails with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label {0} is required")]
    Missing(&'static str),
    #[error("label {label}={value:?} is invalid: {reason}")]
    Invalid {
        label: String,
        value: String,
        reason: String,
    },
    #[error("label {label}={value:?} asks for {feature}, which this conductor does not provide")]
    Unsupported {
        label: String,
        value: String,
        feature: &'static str,
    },
}

pub fn truthy(label: &str, v: &str) -> Result<bool, LabelError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(LabelError::Invalid {
            label: label.into(),
            value: v.into(),
            reason: "not a boolean (true/false)".into(),
        }),
    }
}

pub fn count(label: &str, v: &str) -> Result<u32, LabelError> {
    v.trim().parse::<u32>().map_err(|_| LabelError::Invalid {
        label: label.into(),
        value: v.into(),
        reason: "not a non-negative integer".into(),
    })
}

pub fn non_empty(v: &str) -> Option<String> {
    let t = v.trim();
    (!t.is_empty()).then(|| t.to_string())
}
