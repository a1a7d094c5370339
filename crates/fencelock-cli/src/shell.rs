//! Shell quoting for the commands the CLI suggests in its messages: a resource name is user
//! input and may hold spaces, quotes or a newline, and a suggested command must still be one
//! line that a shell reads back as the same name.

/// `s` as one shell word: as it is when it needs no quoting, in single quotes otherwise, and in
/// `$'...'` (bash, zsh, ksh and POSIX.1-2024 sh) when it holds control characters such as a
/// newline, which would otherwise split the suggested command over lines.
pub(crate) fn quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_owned();
    }
    if !s.chars().any(char::is_control) {
        return format!("'{}'", s.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\'' => out.push_str(r"\'"),
            '\n' => out.push_str(r"\n"),
            '\t' => out.push_str(r"\t"),
            '\r' => out.push_str(r"\r"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What bash reads back from a quoted word.
    fn read_back(word: &str) -> String {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .output()
            .expect("bash");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn words_read_back_as_the_same_name_on_one_line() {
        assert_eq!(quote("order:42"), "order:42");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("a\nb"), r"$'a\nb'");
        for name in [
            "order:42", "a b", "", "it's", "a\nb", "x\u{1}y", "$HOME", "`id`", "a\\'b\n", "é ü",
        ] {
            let word = quote(name);
            assert!(!word.contains('\n'), "{word}");
            assert_eq!(read_back(&word), name, "{word}");
        }
    }
}
