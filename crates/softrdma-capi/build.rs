//! Links the cdylib as rdma-core's `libibverbs.so.1`: its SONAME, and the version nodes
//! (`libibverbs.map`) that BIND_NOW callers check at load time. Each symbol is bound to
//! its node by a `.symver` directive next to its definition (see `src/symbols.rs`):
//! rustc's own version script leaves every symbol it lists unversioned otherwise.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
