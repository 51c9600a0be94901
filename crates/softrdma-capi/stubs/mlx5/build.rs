//! Links the stub as `libmlx5.so.1`: its SONAME, and the version nodes of rdma-core 44's
//! library (`libmlx5.map`) that BIND_NOW callers check at load time.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libmlx5.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libmlx5.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmlx5.so.1");
}
