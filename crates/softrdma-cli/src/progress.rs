//! The progress bar the long commands share (`cm-setup`, `sim`): on stderr, drawn only
//! when stderr is a terminal (indicatif hides it otherwise), so results on stdout and
//! piped output are never mixed with it.

/// A bar of `len` steps, each one `unit` (`"connections"`), with the time elapsed.
pub fn bar(len: u64, unit: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(len);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} {{elapsed}}");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        pb.set_style(style);
    }
    pb
}
