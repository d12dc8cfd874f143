//! The job spec (`spec`) and the physical plan derived from it (`plan`).

pub(crate) mod plan;
pub(crate) mod spec;
