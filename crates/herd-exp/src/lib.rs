//! The experiment folder (being written).
