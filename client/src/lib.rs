//! Placeholder: the election loop lands here (issue 4).
