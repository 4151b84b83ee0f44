// `trainbench-cli reference`: the config reference's tables, generated from the engine's schema
// (tb::api::config_sections, list_kinds) as Markdown blocks between markers, and the check that
// docs/config-reference.md holds them as generated (or the rewrite that makes it so).
#pragma once

#include <map>
#include <ostream>
#include <string>

namespace tb::cli {

/// Every generated block, by name ("section:run", "kinds:model", "kind:optimizer:muon", ...):
/// the Markdown table(s) without the markers.
std::map<std::string, std::string> reference_blocks();

/// Prints every block with its markers ("<!-- generated: NAME -->" ... "<!-- end generated -->").
void print_reference(std::ostream& out);

/// Compares the blocks between markers in the file at `path` with reference_blocks(); prints one
/// line per stale, unknown or missing block to `err` and returns their count. With `update`, the
/// stale blocks are rewritten in place (missing ones are still reported).
int check_reference(const std::string& path, bool update, std::ostream& err);

}  // namespace tb::cli
