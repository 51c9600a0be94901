//! One list of every RDMA device this process can see: softrdma's own (from its
//! configuration) and the kernel's (through the system's rdma-core; see [`crate::kernel`]).

use crate::config::{self, DeviceInfo};
use crate::error::Result;
use crate::kernel::{self, KernelDevice};

/// A device of the list: softrdma's soft device, or a kernel device.
#[derive(Debug, Clone, PartialEq)]
pub enum Device {
    /// A softrdma device, with its configuration.
    Soft(DeviceInfo),
    /// A kernel RDMA device (rxe, siw, mlx5, ...).
    Kernel(KernelDevice),
}

impl Device {
    /// The device's name, as `ibv_devices` prints it.
    pub fn name(&self) -> &str {
        match self {
            Device::Soft(d) => &d.name,
            Device::Kernel(d) => &d.name,
        }
    }
}

/// softrdma's devices, then the kernel's. A kernel device whose name a soft device already
/// has is left out: the name opens the soft one, as it always has.
pub fn devices() -> Result<Vec<Device>> {
    let soft = config::devices()?;
    let mut all: Vec<Device> = soft.iter().cloned().map(Device::Soft).collect();
    all.extend(
        kernel::devices()
            .into_iter()
            .filter(|k| !soft.iter().any(|s| s.name == k.name))
            .map(Device::Kernel),
    );
    Ok(all)
}
