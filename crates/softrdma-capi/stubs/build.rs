//! Links a stub provider library (`softrdma-stub-mlx5` → `libmlx5.so.1`, `softrdma-stub-efa`
//! → `libefa.so.1`) with its SONAME and the version nodes of rdma-core 44's library.
fn main() {
    let pkg = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let lib = pkg.strip_prefix("softrdma-stub-").expect("a stub package");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=lib{lib}.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/lib{lib}.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,lib{lib}.so.1");
}
