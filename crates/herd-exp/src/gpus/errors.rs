//! A GPU's errors while the job runs: the driver's Xid events, which it writes into the
//! kernel log (`NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, GPU has fallen off the
//! bus.`), and uncorrectable ECC errors counted up between two samples. Each one is told
//! apart as the hardware's (the node is at fault: it is blamed) or the application's (a
//! bad address, an illegal instruction: the code is).

use serde::{Deserialize, Serialize};

/// One error of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuError {
    /// When it was seen, ms since the Unix epoch.
    pub t: u64,
    /// `nvidia-smi`'s index of the GPU on its node.
    pub gpu: u32,
    /// Its UUID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// The ranks whose device it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// The Xid, when the driver raised one (an ECC count that grew has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// What it means, in words.
    pub what: String,
    /// Whether the hardware is at fault (the node is blamed), not the application.
    pub hardware: bool,
}

impl GpuError {
    /// `GPU 1 (rank 3) raised Xid 79: the GPU fell off the bus …` (without the node).
    pub fn words(&self) -> String {
        let ranks = match self.ranks.as_slice() {
            [] => String::new(),
            [r] => format!(" (rank {r})"),
            rs => format!(
                " (ranks {})",
                rs.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
        match self.xid {
            Some(x) => format!("GPU {}{ranks} raised Xid {x}: {}", self.gpu, self.what),
            None => format!("GPU {}{ranks}: {}", self.gpu, self.what),
        }
    }
}

/// What Xid `xid` means, and whether the hardware is at fault, after NVIDIA's Xid
/// catalogue; an Xid not listed is taken as the hardware's, unnamed.
pub fn xid_meaning(xid: u32) -> (&'static str, bool) {
    match xid {
        13 => (
            "graphics engine exception: the application's kernel faulted (an out-of-range access, an illegal instruction)",
            false,
        ),
        31 => (
            "GPU memory page fault: the application used an address it does not own",
            false,
        ),
        43 => (
            "GPU stopped processing: the application's kernel faulted and its channel was reset",
            false,
        ),
        45 => (
            "preemptive cleanup: the driver ended the work of a process that died or was killed",
            false,
        ),
        48 => ("double-bit ECC error: the GPU's memory is failing", true),
        61 | 62 => ("internal micro-controller breakpoint or halt: the GPU's firmware stopped", true),
        63 | 64 => (
            "ECC page retirement or row remapping event: the GPU's memory is failing",
            true,
        ),
        74 => ("NVLink error: a link between GPUs failed", true),
        79 => ("the GPU fell off the bus: it no longer answers the host", true),
        92 => ("high single-bit ECC error rate: the GPU's memory is failing", true),
        94 => (
            "contained ECC error: an uncorrectable memory error hit this application; the GPU needs a reset",
            true,
        ),
        95 => (
            "uncontained ECC error: an uncorrectable memory error; every application on the GPU is affected and it needs a reset",
            true,
        ),
        119 | 120 => ("GSP firmware error or timeout: the GPU's system processor stopped answering", true),
        140 => ("unrecovered ECC error: the GPU's memory is failing", true),
        _ => ("an Xid herd does not name (see NVIDIA's Xid catalogue)", true),
    }
}

/// The PCI address (domain, bus, device) and the Xid of a kernel log line of the NVIDIA
/// driver's (`NVRM: Xid (PCI:0000:3b:00): 79, pid=…`); `None` for any other line.
pub fn parse_xid(line: &str) -> Option<((u32, u32, u32), u32)> {
    let rest = &line[line.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (address, rest) = rest.split_once(')')?;
    let xid = rest.trim_start_matches(':').trim_start();
    let digits: String = xid.chars().take_while(char::is_ascii_digit).collect();
    Some((pci_address(address)?, digits.parse().ok()?))
}

/// `DOMAIN:BUS:DEVICE[.FUNCTION]`, hexadecimal, as numbers (the function left out).
fn pci_address(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split(':');
    let (domain, bus, device) = (parts.next()?, parts.next()?, parts.next()?);
    let device = device.split('.').next()?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?))
}

/// Whether `nvidia-smi`'s `pci.bus_id` (`00000000:3B:00.0`) is the GPU at `address` (the
/// kernel log's `0000:3b:00`).
pub fn same_bus(bus_id: &str, address: (u32, u32, u32)) -> bool {
    pci_address(bus_id) == Some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_of_the_kernel_log_are_read() {
        // As the driver writes them (dmesg), fallen off the bus and an application fault.
        let lost =
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.";
        let app = "[ 1234.5678] NVRM: Xid (PCI:0000:b1:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x514648=0x1000e 0x514650=0x0";
        assert_eq!(parse_xid(lost), Some(((0, 0x3b, 0), 79)));
        assert_eq!(parse_xid(app), Some(((0, 0xb1, 0), 13)));
        assert_eq!(
            parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module"),
            None
        );
        assert!(same_bus("00000000:3B:00.0", (0, 0x3b, 0)));
        assert!(!same_bus("00000000:3C:00.0", (0, 0x3b, 0)));
    }

    #[test]
    fn hardware_xids_are_told_from_the_applications() {
        for hw in [48, 63, 74, 79, 92, 94, 95, 140, 999] {
            assert!(xid_meaning(hw).1, "Xid {hw} is the hardware's");
        }
        for app in [13, 31, 43, 45] {
            assert!(!xid_meaning(app).1, "Xid {app} is the application's");
        }
        assert!(xid_meaning(79).0.contains("fell off the bus"));
    }

    #[test]
    fn an_error_is_said_with_its_gpu_ranks_and_xid() {
        let e = GpuError {
            t: 0,
            gpu: 1,
            uuid: "GPU-b".into(),
            ranks: vec![3],
            xid: Some(79),
            what: xid_meaning(79).0.into(),
            hardware: true,
        };
        assert_eq!(
            e.words(),
            "GPU 1 (rank 3) raised Xid 79: the GPU fell off the bus: it no longer answers the host"
        );
    }
}
