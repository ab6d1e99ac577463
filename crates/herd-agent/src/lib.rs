//! herd agent
