//! End-to-end tests against the real SLURM test bed (`testbed/up`) with real PyTorch workers.
//!
//! One test binary; nextest runs its tests one at a time (test group `bed` in
//! `.config/nextest.toml`) because the bed has 2 real cores. A test that cannot reach the
//! bed fails with a message saying how to bring it up; none of them skips. The wheel's
//! tests (`wheel`, `quickstart`) also need what `scripts/test-all` builds (`HERD_WHEEL_*`);
//! `quickstart`, README.md's quick start run as written, and two of `wheel`'s need no bed.

mod avoid_bad_nodes;
mod bed_repair;
mod chains;
mod checkpoints;
mod containers;
mod ddp_baseline;
mod frameworks;
mod frameworks_stop;
mod goodput;
mod gpus;
mod hangs;
mod herd_env;
mod hostlist_differential;
mod launch;
mod logs;
mod preflight;
mod quickstart;
mod report;
mod report_plots;
mod slurm_releases;
mod spares;
mod srun_mode;
mod status;
mod staying_alive;
mod submit;
mod support;
mod swav_mini;
mod sweeps;
mod teardown;
mod top;
mod train_ddp_contract;
mod two_networks;
mod warm;
mod wheel;
