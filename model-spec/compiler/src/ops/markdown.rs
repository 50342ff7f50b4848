//! The supported-op list as markdown, rendered from the registry for the
//! README's `<!-- ops:begin -->` … `<!-- ops:end -->` block.

use super::REGISTRY;

/// What every model must satisfy whatever its ops, said after the list.
const INPUTS_NOTE: &str = "Inputs are float32 with static shapes except a symbolic batch. \
                           Anything else is rejected with an error naming the node, op and \
                           attribute.";

/// The supported ONNX ops as markdown: one list item per op or op family
/// (each entry's `OpDef::summary`, in registry order), then
/// a paragraph on inputs. The README's supported-op block is this text.
pub fn supported_ops_markdown() -> String {
    let mut text = String::new();
    for def in REGISTRY {
        text.push_str("- ");
        text.push_str(def.summary);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(INPUTS_NOTE);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::super::supported_onnx_ops;
    use super::*;

    /// Whether `text` has `word` delimited by non-identifier characters.
    fn has_word(text: &str, word: &str) -> bool {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == word)
    }

    #[test]
    fn one_line_per_entry_naming_each_of_its_ops() {
        let text = supported_ops_markdown();
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(lines.len(), REGISTRY.len(), "{text}");
        for (line, def) in lines.iter().zip(REGISTRY) {
            for op in def.onnx {
                assert!(has_word(line, op), "'{line}' does not name {op}");
            }
        }
        assert!(text.starts_with(
            "- Conv (2-D; strides, pads incl. `auto_pad`, dilations, groups incl. depthwise, \
             optional bias)\n"
        ));
        assert!(
            text.ends_with("naming the node, op and attribute.\n"),
            "{text}"
        );
    }

    /// The README's op block is `supported_ops_markdown()`, exactly;
    /// `AOTUNE_BLESS=1` rewrites it.
    #[test]
    fn the_readme_op_block_is_the_registrys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let readme =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (begin, end) = ("<!-- ops:begin -->\n", "<!-- ops:end -->");
        let start = readme
            .find(begin)
            .expect("README.md has an <!-- ops:begin --> line")
            + begin.len();
        let stop = start
            + readme[start..]
                .find(end)
                .expect("README.md has an <!-- ops:end --> line");
        let fresh = supported_ops_markdown();
        if std::env::var_os("AOTUNE_BLESS").is_some() {
            let updated = format!("{}{fresh}{}", &readme[..start], &readme[stop..]);
            std::fs::write(&path, updated).unwrap();
            return;
        }
        assert!(
            readme[start..stop] == fresh,
            "README.md's op block is not supported_ops_markdown(): rerun this test with \
             AOTUNE_BLESS=1 and commit README.md"
        );
        for op in supported_onnx_ops() {
            assert!(
                has_word(&fresh, op),
                "supported_ops_markdown() does not name {op}"
            );
        }
    }
}
