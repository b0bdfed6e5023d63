// Small helpers of the Program data model (dsl/program.h).
#include "dsl/program.h"

namespace maestro {

const char* modality_name(Modality m) {
  switch (m) {
    case Modality::Text: return "text";
    case Modality::Image: return "image";
    case Modality::Audio: return "audio";
    case Modality::Video: return "video";
  }
  return "?";
}

const char* ModelSpec::builtin() const {
  switch (spec.index()) {
    case 0: return "transformer";
    case 1: return "vit";
    case 2: return "audio_encoder";
    default: return "mlp";
  }
}

int64_t ModelSpec::input_width() const {
  if (auto* m = std::get_if<MlpSpec>(&spec)) return m->in;
  if (auto* t = std::get_if<TransformerSpec>(&spec)) return t->hidden;
  if (auto* v = std::get_if<VitSpec>(&spec)) return v->hidden;
  return std::get<AudioEncoderSpec>(spec).hidden;
}

int64_t ModelSpec::output_width() const {
  if (auto* m = std::get_if<MlpSpec>(&spec)) return m->out;
  if (auto* t = std::get_if<TransformerSpec>(&spec)) return t->hidden;
  if (auto* v = std::get_if<VitSpec>(&spec)) return v->hidden;
  return std::get<AudioEncoderSpec>(spec).hidden;
}

bool Condition::eval(ModalitySet s) const {
  switch (kind) {
    case Kind::True: return true;
    case Kind::Has: return s.has(modality);
    case Kind::And: return args[0].eval(s) && args[1].eval(s);
    case Kind::Or: return args[0].eval(s) || args[1].eval(s);
    case Kind::Not: return !args[0].eval(s);
  }
  return false;
}

std::string Condition::str() const {
  switch (kind) {
    case Kind::True: return "always";
    case Kind::Has: return std::string("has(") + modality_name(modality) + ")";
    case Kind::And: return "(" + args[0].str() + " and " + args[1].str() + ")";
    case Kind::Or: return "(" + args[0].str() + " or " + args[1].str() + ")";
    case Kind::Not: return "not " + args[0].str();
  }
  return "?";
}

const Section* Program::find_section(const std::string& name) const {
  for (const auto& s : sections)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace maestro
