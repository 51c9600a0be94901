//! What the command says about itself: `--version` in full, the shell completions
//! (`clap_complete`) and the man pages (`clap_mangen`), all made from the CLI's own clap
//! definitions, so that they cannot drift from it.

use crate::Cli;
use clap::CommandFactory;
use std::path::Path;
use std::process::ExitCode;

/// `softrdma --version`: the version, the commit it was built from, and the versions of
/// the two interfaces other programs depend on: the protocol between the processes that
/// share a device (both must speak the same), and the C ABI of the drop-in libraries.
pub fn long_version() -> String {
    format!(
        "{} (commit {})\nshare protocol {}\nABI {}",
        env!("CARGO_PKG_VERSION"),
        env!("SOFTRDMA_GIT_COMMIT"),
        softrdma::SHARE_PROTOCOL_VERSION,
        softrdma_capi::ABI,
    )
}

/// `softrdma completions SHELL`: the completion script, on stdout.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "softrdma", &mut script);
    match std::io::stdout().write_all(&script) {
        // A reader that stopped early (`| head`) is no error of ours.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("softrdma completions: {e}");
            ExitCode::from(2)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// `softrdma manpages DIR`: `softrdma.1` and one page per subcommand
/// (`softrdma-link-add.1`), as `git` and `rdma` name theirs.
pub fn manpages(dir: &Path) -> ExitCode {
    let run = || -> std::io::Result<usize> {
        std::fs::create_dir_all(dir)?;
        write_pages(&Cli::command(), ("softrdma", "softrdma"), dir)
    };
    match run() {
        Ok(n) => {
            println!("{n} man pages in {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softrdma manpages: {}: {e}", dir.display());
            ExitCode::from(2)
        }
    }
}

/// Writes `cmd`'s page as `NAME.1`, then its visible subcommands' pages; gives how many.
/// The page's title is the full name (`softrdma-link-add`), and the synopsis shows how the
/// command is typed (`softrdma link add`; `softrdma rc-pingpong` keeps its hyphen).
fn write_pages(
    cmd: &clap::Command,
    (name, typed): (&str, &str),
    dir: &Path,
) -> std::io::Result<usize> {
    let cmd = cmd
        .clone()
        .name(name.to_owned())
        .bin_name(typed.to_owned())
        .disable_help_subcommand(true);
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    std::fs::write(dir.join(format!("{name}.1")), page)?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_name = sub.get_name();
        n += write_pages(
            sub,
            (
                &format!("{name}-{sub_name}"),
                &format!("{typed} {sub_name}"),
            ),
            dir,
        )?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's help shows an example, and there is a page for each.
    #[test]
    fn every_subcommand_has_an_example_and_a_page() {
        fn walk(cmd: &clap::Command, name: &str, out: &mut Vec<String>) {
            let help = cmd
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.contains("Example") && help.contains("softrdma "),
                "`{name} --help` shows no example"
            );
            out.push(name.to_owned());
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                if sub.get_name() != "help" {
                    walk(sub, &format!("{name}-{}", sub.get_name()), out);
                }
            }
        }
        let mut names = Vec::new();
        walk(&Cli::command(), "softrdma", &mut names);
        let dir = std::env::temp_dir().join(format!("softrdma-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = write_pages(&Cli::command(), ("softrdma", "softrdma"), &dir).unwrap();
        assert_eq!(n, names.len());
        for name in &names {
            let page = std::fs::read_to_string(dir.join(format!("{name}.1"))).unwrap();
            assert!(
                page.starts_with(".ie") || page.contains(".TH"),
                "{name}.1: {page}"
            );
        }
        // The synopsis is typed as the command is: hyphens inside a subcommand's name stay.
        let page = std::fs::read_to_string(dir.join("softrdma-rc-pingpong.1")).unwrap();
        assert!(page.contains("softrdma rc\\-pingpong"), "{page}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The long version names the commit, the share protocol and the ABI.
    #[test]
    fn long_version_names_commit_protocol_and_abi() {
        let v = long_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        assert!(v.contains("commit "), "{v}");
        assert!(v.contains("share protocol "), "{v}");
        assert!(v.contains("IBVERBS_1.14"), "{v}");
    }
}
