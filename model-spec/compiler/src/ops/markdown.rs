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

    /// The README's op block (when the checkout has it) names every op the
    /// registry supports.
    #[test]
    fn the_readme_names_every_supported_op() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let Ok(readme) = std::fs::read_to_string(&path) else {
            return;
        };
        let block = readme
            .split("<!-- ops:begin -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- ops:end -->").next())
            .expect("README.md has an <!-- ops:begin --> … <!-- ops:end --> block");
        for op in supported_onnx_ops() {
            assert!(
                has_word(block, op),
                "README.md's op block does not name {op}: paste supported_ops_markdown() there"
            );
        }
    }
}
