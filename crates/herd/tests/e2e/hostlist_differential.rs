//! placeholder: differential test of herd-hostlist against scontrol (being written).
