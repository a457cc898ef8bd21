// Empty: it exists for its build-dependency (syn's features; Cargo.toml says why).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
