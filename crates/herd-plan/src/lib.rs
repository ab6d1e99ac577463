//! Job plans (being written).
