// Command-line flags derived from the option table: each flag's help names
// its range, default and environment variable, so `--help` cannot drift
// from what the file and the environment accept.
#include "cli/cli.h"

namespace rg {

void OptionFlags::add(CLI::App* sub, FlagOf which) {
  for (const auto& opt : options()) {
    if (opt.flag_of != which) continue;
    Bound& b = bound_.emplace_back(Bound{&opt, nullptr, {}});
    std::string help(opt.help);
    const std::string range = opt.range_text(), def = opt.default_text();
    if (!range.empty()) help += "; " + range;
    if (!def.empty() && def != "[]") help += "; default " + def;
    help += "; env " + opt.env() + ", file " + std::string(opt.path);
    b.flag = sub->add_option(std::string(opt.flag), b.texts, help);
    if (opt.spec.type != OptionType::kStringList)
      b.flag->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    // Choices as CLI11 shows an IsMember check's, TEXT:{a,b}: the bash
    // completion offers them (packaging/gen-completion.sh reads --help).
    std::string choices;
    for (auto c : opt.spec.choices) choices += (choices.empty() ? "" : ",") + std::string(c);
    if (opt.spec.type == OptionType::kBoolean) choices = "true,false";
    b.flag->type_name(opt.spec.type == OptionType::kInteger ? "INT"
                      : choices.empty()                     ? "TEXT"
                                                            : "TEXT:{" + choices + "}");
  }
}

FlagValues OptionFlags::given() const {
  FlagValues out;
  for (const auto& b : bound_)
    if (b.flag->count()) out[std::string(b.option->path)] = b.texts;
  return out;
}

}  // namespace rg
