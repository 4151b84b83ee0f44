// The config reference's generated tables. One row per key: | key | type | default | allowed |
// meaning |; kinds get a table of the family and one table of fields per kind.
#include "app/cli/reference.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "engine/api/config_api.h"

namespace tb::cli {

namespace {

constexpr const char* kBegin = "<!-- generated: ";
constexpr const char* kEnd = "<!-- end generated -->";

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string code(const std::string& s) {
  return s.empty() ? "" : "`" + s + "`";
}

std::string default_cell(const api::FieldInfo& f) {
  if (f.required) return "required";
  if (f.default_toml.empty()) return "none";
  return code(f.default_toml);
}

std::string field_table(const std::vector<api::FieldInfo>& fields, const std::string& kind_row) {
  std::ostringstream os;
  os << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n" << kind_row;
  for (const auto& f : fields)
    os << "| " << code(f.key) << " | " << f.type << " | " << cell(default_cell(f)) << " | "
       << cell(f.allowed) << " | " << cell(f.help) << " |\n";
  return os.str();
}

std::string kind_row(const std::string& family, const std::string& def) {
  std::string names;
  for (const auto& k : api::list_kinds(family))
    names += (names.empty() ? "" : ", ") + code(k.name);
  return "| `kind` | string | " + code("\"" + def + "\"") + " | " + names + " | the " +
         (family == "data" ? std::string("data set") : family) + " (below) |\n";
}

std::string kinds_table(const std::string& family, const std::string& detail_header) {
  std::ostringstream os;
  os << "| kind | " << detail_header << " | meaning |\n|---|---|---|\n";
  for (const auto& k : api::list_kinds(family))
    os << "| " << code(k.name) << " | " << cell(k.detail.empty() ? "-" : k.detail) << " | "
       << cell(k.help) << " |\n";
  return os.str();
}

}  // namespace

std::map<std::string, std::string> reference_blocks() {
  std::map<std::string, std::string> out;
  for (const auto& s : api::config_sections()) {
    const std::string name = s.name.empty() ? "top" : s.name;
    out["section:" + name] =
        field_table(s.fields, s.name == "data" ? kind_row("data", "fashion-mnist") : "");
  }
  out["section:optimizer"] = field_table(api::optimizer_section().fields, "");
  out["kinds:model"] = kinds_table("model", "task");
  out["kinds:data"] = kinds_table("data", "task");
  out["kinds:optimizer"] = kinds_table("optimizer", "the rest goes to");
  out["kinds:scheduler"] = kinds_table("scheduler", "PyTorch class");
  for (const auto& family : api::config_families()) {
    for (const auto& k : api::list_kinds(family)) {
      if (k.fields.empty()) continue;
      out["kind:" + family + ":" + k.name] = field_table(k.fields, "");
    }
  }
  return out;
}

void print_reference(std::ostream& out) {
  // In the order a config is read, each under a heading (the markers alone vanish once the
  // Markdown is rendered): the sections, then each family's kinds and each kind's fields.
  const auto blocks = reference_blocks();
  const auto block = [&](const std::string& heading, const std::string& name) {
    const auto it = blocks.find(name);
    if (it == blocks.end()) return;
    out << heading << "\n\n" << kBegin << name << " -->\n" << it->second << kEnd << "\n\n";
  };
  out << "# TrainBench config reference (trainbench-cli reference; the whole text with examples: "
         "docs/config-reference.md)\n\n";
  for (const auto& s : api::config_sections())
    block(s.name.empty() ? "## Top-level keys" : "## `[" + s.name + "]`",
          "section:" + (s.name.empty() ? std::string("top") : s.name));
  block("## `[optimizer]` (beside the kind's settings)", "section:optimizer");
  for (const auto& family : api::config_families()) {
    block("## " + family + " kinds", "kinds:" + family);
    for (const auto& k : api::list_kinds(family))
      block("### " + family + " kind `" + k.name + "`", "kind:" + family + ":" + k.name);
  }
}

int check_reference(const std::string& path, bool update, std::ostream& err) {
  std::ifstream in(path);
  if (!in) {
    err << "reference: cannot open " << path << "\n";
    return 1;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  const auto blocks = reference_blocks();
  std::map<std::string, bool> seen;
  std::vector<std::string> result;
  int problems = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    result.push_back(lines[i]);
    if (lines[i].rfind(kBegin, 0) != 0) continue;
    const std::string rest = lines[i].substr(std::string(kBegin).size());
    const std::string name = rest.substr(0, rest.find(" -->"));
    std::size_t end = i + 1;
    std::string body;
    while (end < lines.size() && lines[end] != kEnd)
      body += lines[end++] + "\n";
    if (end == lines.size()) {
      err << path << ":" << i + 1 << ": block '" << name << "' has no end marker\n";
      return problems + 1;
    }
    const auto it = blocks.find(name);
    if (it == blocks.end()) {
      err << path << ":" << i + 1 << ": block '" << name << "' is not generated by the engine\n";
      ++problems;
    } else {
      seen[name] = true;
      if (it->second != body) {
        err << path << ":" << i + 1 << ": block '" << name << "' is stale"
            << (update ? " (rewritten)"
                       : " (trainbench-cli reference --check " + path + " --update)")
            << "\n";
        if (!update) ++problems;
        body = it->second;
      }
    }
    std::istringstream b(body);
    for (std::string l; std::getline(b, l);)
      result.push_back(l);
    result.push_back(kEnd);
    i = end;
  }
  for (const auto& [name, text] : blocks) {
    if (seen.count(name)) continue;
    err << path << ": block '" << name << "' is missing (add '" << kBegin << name << " -->' and '"
        << kEnd << "' where it belongs)\n";
    ++problems;
  }
  if (update) {
    std::ofstream out(path, std::ios::trunc);
    for (const auto& l : result)
      out << l << "\n";
    if (!out) {
      err << "reference: cannot write " << path << "\n";
      return problems + 1;
    }
  }
  return problems;
}

}  // namespace tb::cli
