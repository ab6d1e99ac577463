//! The SLURM allocation model.
