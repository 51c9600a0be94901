//! Links the stub as `libefa.so.1`: its SONAME, and the version nodes of rdma-core 44's
//! library (`libefa.map`) that BIND_NOW callers check at load time.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libefa.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libefa.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libefa.so.1");
}
