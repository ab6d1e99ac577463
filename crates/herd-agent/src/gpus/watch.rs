//! A GPU's errors while the attempt runs, as the sampler sees them: the driver's Xid lines
//! in the kernel log (`/dev/kmsg`, followed from the attempt's start on), an uncorrectable
//! ECC count that grew between two samples, and a GPU `nvidia-smi` says is lost.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use herd_exp::gpus::{parse_xid, same_bus, xid_meaning, GpuError, Sample};

/// The kernel log, read from where it stood when opened: each read hands over the records
/// written since (whole lines; `/dev/kmsg` gives one record a read, a plain file any).
pub(crate) struct KernelLog {
    file: File,
}

impl KernelLog {
    /// `path` (`/dev/kmsg`), from its end; why not, when it cannot be read (a kernel with
    /// `kernel.dmesg_restrict = 1` keeps it from users).
    pub(crate) fn open(path: &Path) -> std::io::Result<KernelLog> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)?;
        file.seek(SeekFrom::End(0))?;
        // Reading is what the kernel refuses to users; try once now.
        let mut log = KernelLog { file };
        log.messages()?;
        Ok(log)
    }

    /// The messages written since the last read, without `/dev/kmsg`'s
    /// `PRIORITY,SEQUENCE,TIME,FLAGS;` prefix.
    pub(crate) fn messages(&mut self) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    for line in String::from_utf8_lossy(&buf[..n]).lines() {
                        let text = match line.split_once(';') {
                            Some((head, text)) if head.split(',').count() >= 3 => text,
                            _ => line,
                        };
                        if !text.is_empty() {
                            out.push(text.to_owned());
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // Records were overwritten before they were read: go on with the next.
                Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The error of an Xid line `message` of the kernel log about one of `gpus` (the node's
/// GPUs' newest samples, which carry their PCI bus ids), seen at `t`; `None` for any other
/// line, or a GPU that is not the job's.
pub(crate) fn xid_error(message: &str, gpus: &[Sample], t: u64) -> Option<GpuError> {
    let (address, xid) = parse_xid(message)?;
    let gpu = gpus
        .iter()
        .find(|s| s.pci.as_deref().is_some_and(|p| same_bus(p, address)))?;
    let (what, hardware) = xid_meaning(xid);
    Some(GpuError {
        t,
        gpu: gpu.gpu,
        uuid: gpu.uuid.clone(),
        ranks: gpu.ranks.clone(),
        xid: Some(xid),
        what: what.to_owned(),
        hardware,
    })
}

/// The error when sample `now`'s uncorrectable ECC count is above `before`'s: the GPU's
/// memory failed while the job ran.
pub(crate) fn ecc_error(before: &Sample, now: &Sample) -> Option<GpuError> {
    let (was, is) = (before.ecc_uncorrected?, now.ecc_uncorrected?);
    (is > was).then(|| GpuError {
        t: now.t,
        gpu: now.gpu,
        uuid: now.uuid.clone(),
        ranks: now.ranks.clone(),
        xid: None,
        what: format!(
            "{} new uncorrectable ECC error{} ({is} since its driver loaded): its memory is failing",
            is - was,
            if is - was == 1 { "" } else { "s" }
        ),
        hardware: true,
    })
}

/// The error when `nvidia-smi` prints that one of `gpus` is lost (`Unable to determine the
/// device handle for GPU0000:3B:00.0: GPU is lost. Reboot the system to recover this
/// GPU`); `None` for any other line.
pub(crate) fn lost_error(line: &str, gpus: &[Sample], t: u64) -> Option<GpuError> {
    if !line.contains("GPU is lost") {
        return None;
    }
    let after = &line[line.find("for GPU")? + "for GPU".len()..];
    let address = after
        .split(|c: char| c.is_whitespace() || c == ',')
        .next()?;
    let address = address.trim_end_matches(':');
    let gpu = gpus.iter().find(|s| {
        s.pci
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case(address) || p.ends_with(address))
    })?;
    Some(GpuError {
        t,
        gpu: gpu.gpu,
        uuid: gpu.uuid.clone(),
        ranks: gpu.ranks.clone(),
        xid: None,
        what: "the GPU is lost: its driver no longer reaches it (the node needs a reboot)"
            .to_owned(),
        hardware: true,
    })
}
