//! Links the provider with `-z nodelete`: libfabric `dlclose`s it at exit right after its
//! `cleanup`, and the fabric layer's progress threads (and softrdma's device threads)
//! of endpoints a program never closed must not find their code unmapped.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
