//! A small command-line parser: `--name value`, `--name=value`, repeatable options, flags,
//! and an error for anything left over (a typo must not silently run the default).

/// Whether the command line asks for the usage: `--help` or `-h` as a whole argument, before
/// or after the subcommand (`lease-harness run --help`). A value that merely contains it
/// (`--elector-cmd "prog -h"`) is one argument and does not count.
pub fn wants_help(argv: &[String]) -> bool {
    argv.iter().any(|a| a == "--help" || a == "-h")
}

pub struct Args {
    rest: Vec<String>,
}

impl Args {
    pub fn new(args: Vec<String>) -> Args {
        // Accept `--name=value` as `--name value`.
        let mut rest = vec![];
        for a in args {
            match a.split_once('=') {
                Some((k, v)) if k.starts_with("--") => {
                    rest.push(k.to_string());
                    rest.push(v.to_string());
                }
                _ => rest.push(a),
            }
        }
        Args { rest }
    }

    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|a| a != name);
        self.rest.len() != before
    }

    /// Every value of a repeatable option, each taken as is (no comma split): `--redis` is
    /// repeatable (quorum mode) and a `redis+sentinel://` URL lists its Sentinels with commas.
    pub fn repeated(&mut self, name: &str) -> Result<Vec<String>, String> {
        let mut out = vec![];
        while let Some(i) = self.rest.iter().position(|a| a == name) {
            if i + 1 >= self.rest.len() {
                return Err(format!("{name} needs a value"));
            }
            out.push(self.rest.remove(i + 1));
            self.rest.remove(i);
        }
        Ok(out)
    }

    /// Every value of a repeatable list option; `--fault a,b --fault c` gives `[a, b, c]`.
    pub fn values(&mut self, name: &str) -> Result<Vec<String>, String> {
        Ok(self
            .repeated(name)?
            .iter()
            .flat_map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_string))
            .collect())
    }

    /// A single-valued option, taken as is (no comma split).
    pub fn value(&mut self, name: &str) -> Result<Option<String>, String> {
        let mut out = self.repeated(name)?;
        if out.len() > 1 {
            return Err(format!("{name} given more than once"));
        }
        Ok(out.pop())
    }

    pub fn parsed<T: std::str::FromStr>(&mut self, name: &str, default: T) -> Result<T, String> {
        match self.value(name)? {
            None => Ok(default),
            Some(s) => s.parse().map_err(|_| format!("{name}: cannot parse {s:?}")),
        }
    }

    pub fn required(&mut self, name: &str) -> Result<String, String> {
        self.value(name)?
            .ok_or_else(|| format!("{name} is required"))
    }

    /// Positional arguments left (after every option was taken); options left are errors.
    pub fn positional(self) -> Result<Vec<String>, String> {
        if let Some(a) = self.rest.iter().find(|a| a.starts_with("--")) {
            return Err(format!("unknown option {a}"));
        }
        Ok(self.rest)
    }

    pub fn done(self) -> Result<(), String> {
        match self.rest.first() {
            Some(a) => Err(format!("unexpected argument {a}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Args {
        Args::new(s.split_whitespace().map(str::to_string).collect())
    }

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn help_anywhere_but_not_inside_a_value() {
        assert!(wants_help(&v(&["--help"])));
        assert!(wants_help(&v(&["run", "--help"])));
        assert!(wants_help(&v(&["run", "--runs", "3", "-h"])));
        assert!(!wants_help(&v(&["run", "--runs", "3"])));
        assert!(!wants_help(&v(&["run", "--elector-cmd", "prog -h"])));
        assert!(!wants_help(&v(&["run", "--helpful"])));
    }

    #[test]
    fn options_flags_and_leftovers() {
        let mut x = a("--runs 3 --fault kill,pause --fault=resign --no-fence dir");
        assert_eq!(x.parsed("--runs", 1u32), Ok(3));
        assert_eq!(x.parsed("--seed", 7u64), Ok(7));
        assert_eq!(
            x.values("--fault").as_deref(),
            Ok(&["kill".to_string(), "pause".into(), "resign".into()][..])
        );
        assert!(x.flag("--no-fence"));
        assert!(!x.flag("--no-fence"));
        assert_eq!(x.positional(), Ok(vec!["dir".to_string()]));
        assert!(a("--runs x").parsed("--runs", 1u32).is_err());
        assert!(a("--bogus 1").done().is_err());
        assert!(a("--runs").value("--runs").is_err());
        // A Sentinel URL keeps its commas; a repeated --redis gives one value per occurrence.
        let mut r = a("--redis redis+sentinel://a:1,b:2/m --redis redis://c:3/");
        assert_eq!(
            r.repeated("--redis"),
            Ok(vec![
                "redis+sentinel://a:1,b:2/m".to_string(),
                "redis://c:3/".to_string()
            ])
        );
    }
}
