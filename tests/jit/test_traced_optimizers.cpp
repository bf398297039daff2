// Optimizer steps traced from the very first step, their hyper-parameters arguments of the trace
// (issue #28): compiled and saved steps follow eager step for step over 10 steps, a scheduler's
// learning-rate change reaches them, and a change of the update's form (momentum switched off)
// is a GuardError, on which jit::compile(fn) re-traces.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>

#include "helpers.h"
#include "kiln/jit/aot.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/optim.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

using test::max_rel_error;
using test::rnd;
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::shared_ptr<nn::Module> make_model() {
  auto m = models::mlp({12, 24, 4});
  autograd::NoGradGuard g;
  uint32_t seed = 90;
  for (auto& p : m->parameters()) copy_(p, rnd(p.sizes(), seed++, 0.3));
  return m;
}

struct Trainer {
  std::shared_ptr<nn::Module> model = make_model();
  std::unique_ptr<optim::Optimizer> opt;
  explicit Trainer(const MakeOptimizer& make) : opt(make(model->parameters())) {}
  std::function<TensorList(const TensorList&)> step() {
    return [this](const TensorList& in) {
      opt->zero_grad();
      Tensor loss = cross_entropy(model->forward(in[0]), in[1]);
      loss.backward();
      opt->step();
      return TensorList{loss.detach()};
    };
  }
};

const Tensor& batch_x() {
  static const Tensor x = rnd({6, 12}, 91);
  return x;
}
const Tensor& batch_y() {
  static const Tensor y = tensor({0.0, 1.0, 2.0, 3.0, 1.0, 0.0}, DType::Int64);
  return y;
}

void expect_same_parameters(nn::Module& got, nn::Module& want, const std::string& when) {
  auto pg = got.parameters(), pw = want.parameters();
  ASSERT_EQ(pg.size(), pw.size());
  for (size_t i = 0; i < pw.size(); ++i)
    EXPECT_LE(max_rel_error(pg[i], pw[i]), 1e-4) << "parameter " << i << " " << when;
}

jit::SpecializeOptions no_disk_cache() {
  jit::SpecializeOptions o;
  o.compile.disk_cache = false;
  return o;
}

// The first step of t traced with its parameters named as the model names them (the names a
// saved step's state carries).
jit::TracedFunction trace_named(Trainer& t) {
  jit::TraceOptions options;
  options.warn_on_read_back = false;
  for (const auto& [name, p] : t.model->named_parameters())
    options.named_captures.push_back({name, p});
  return jit::trace(t.step(), {batch_x(), batch_y()}, options);
}

// Traces the first step (no eager step before it), compiles it and takes 9 more steps, calling
// between(optimizer, step) on both sides first (a scheduler); parameters follow eager.
void expect_compiled_steps_match_eager(const MakeOptimizer& make,
                                       const std::function<void(optim::Optimizer&)>& between = {}) {
  Trainer eager(make), compiled(make);
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  jit::TracedFunction traced = jit::trace(compiled.step(), {batch_x(), batch_y()}, quiet);
  eager.step()({batch_x(), batch_y()});
  expect_same_parameters(*compiled.model, *eager.model, "after the traced step");
  EXPECT_FALSE(traced.host_values().empty());
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction f = jit::compile(traced, o);
  for (int s = 2; s <= 10; ++s) {
    if (between) {
      between(*eager.opt);
      between(*compiled.opt);
    }
    Tensor le = eager.step()({batch_x(), batch_y()})[0];
    Tensor lc = f({batch_x(), batch_y()})[0];
    EXPECT_LE(max_rel_error(lc, le), 1e-4) << "loss of step " << s;
  }
  expect_same_parameters(*compiled.model, *eager.model, "after 10 steps");
}

TEST(TracedOptimizers, SgdMomentumFromTheFirstStep) {
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p,
                                        optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  });
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  });
}

TEST(TracedOptimizers, Adam) {
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01).weight_decay(1e-2));
  });
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01).amsgrad(true));
  });
}

TEST(TracedOptimizers, AdamW) {
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.01));
  });
}

TEST(TracedOptimizers, RMSpropAndAdagrad) {
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::RMSprop>(
        p, optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(1e-3));
  });
  expect_compiled_steps_match_eager([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions(0.05).lr_decay(0.1));
  });
}

// The bias corrections follow the step count from call to call: Adam's count is an in-out value.
TEST(TracedOptimizers, AdamStepCountAdvancesInTheCompiledStep) {
  Trainer t([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01));
  });
  jit::TracedFunction traced = jit::trace(t.step(), {batch_x(), batch_y()});
  jit::CompiledFunction f = jit::compile(traced);
  for (int s = 0; s < 4; ++s) f({batch_x(), batch_y()});
  const Tensor w = t.model->parameters()[0];
  const auto& st = t.opt->state().at(w.impl());
  EXPECT_DOUBLE_EQ(std::get<Tensor>(st.at("step")).item<double>(), 5.0);
}

// A scheduler changes the learning rate between compiled steps: the step reads it at every call.
TEST(TracedOptimizers, SchedulerReachesTheCompiledStep) {
  std::vector<std::unique_ptr<optim::StepLR>> schedulers;
  expect_compiled_steps_match_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.5));
      },
      [&](optim::Optimizer& opt) {
        // One scheduler per optimizer, halving the rate every 2 steps.
        for (auto& s : schedulers)
          if (&s->optimizer() == &opt) return s->step();
        schedulers.push_back(std::make_unique<optim::StepLR>(opt, 2, 0.5));
        schedulers.back()->step();
      });
  EXPECT_EQ(schedulers.size(), 2u);
}

// Switching momentum off changes the update's form: the compiled step refuses, leaving the
// parameters as they were; jit::compile(fn) traces the new form and follows eager.
TEST(TracedOptimizers, ChangedFormIsAGuardErrorOrARetrace) {
  MakeOptimizer make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.05).momentum(0.9));
  };
  Trainer eager(make), once(make), retraced(make);
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  jit::CompiledFunction f = jit::compile(jit::trace(once.step(), {batch_x(), batch_y()}, quiet));
  jit::SpecializedFunction g = jit::compile(retraced.step());
  g({batch_x(), batch_y()});
  eager.step()({batch_x(), batch_y()});
  for (auto* opt : {eager.opt.get(), once.opt.get(), retraced.opt.get()})
    opt->param_groups()[0].options_as<optim::SGDOptions>().momentum(0);
  const Tensor before = once.model->parameters()[0].clone();
  try {
    f({batch_x(), batch_y()});
    ADD_FAILURE() << "a step traced with momentum ran without";
  } catch (const GuardError& e) {
    EXPECT_NE(std::string(e.what()).find("SGD.group0.momentum != 0 = 1; it is now 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(test::max_abs_diff(once.model->parameters()[0], before), 0.0);
  for (int s = 0; s < 3; ++s) {
    eager.step()({batch_x(), batch_y()});
    g({batch_x(), batch_y()});
  }
  EXPECT_EQ(g.num_specializations(), 2u);
  expect_same_parameters(*retraced.model, *eager.model, "after the re-traced steps");
}

// A saved step takes the hyper-parameters as inputs after the batch: the caller drives the
// learning rate, as a scheduler would, and the session's state follows eager.
TEST(TracedOptimizers, SavedStepTakesTheLearningRateAsAnInput) {
  MakeOptimizer make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
  };
  Trainer eager(make), saved(make);
  jit::TracedFunction traced = trace_named(saved);
  eager.step()({batch_x(), batch_y()});
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  ASSERT_EQ(model->inputs().size(), 5u);
  EXPECT_EQ(model->inputs()[2].name, "SGD.group0.lr");
  EXPECT_EQ(model->inputs()[3].name, "SGD.group0.momentum");
  EXPECT_EQ(model->inputs()[4].name, "SGD.group0.dampening");
  EXPECT_EQ(model->inputs()[2].dtype, DType::Float64);
  rt::Session session(model);
  double lr = 0.1;
  for (int s = 2; s <= 6; ++s) {
    lr *= 0.7;
    eager.opt->param_groups()[0].options().set_lr(lr);
    Tensor le = eager.step()({batch_x(), batch_y()})[0];
    Tensor lr_in = scalar_tensor(lr, TensorOptions(DType::Float64));
    Tensor momentum_in = scalar_tensor(0.9, TensorOptions(DType::Float64));
    Tensor dampening_in = scalar_tensor(0.0, TensorOptions(DType::Float64));
    auto out = session.run({batch_x().impl(), batch_y().impl(), lr_in.impl(), momentum_in.impl(),
                            dampening_in.impl()});
    EXPECT_LE(max_rel_error(Tensor(out[0]), le), 1e-4) << "loss of step " << s;
  }
  for (const auto& [name, w] : eager.model->named_parameters()) {
    const TensorImpl* got = session.state(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_LE(max_rel_error(Tensor(TensorImplPtr(const_cast<TensorImpl*>(got))), w), 1e-4) << name;
  }
}

// `kiln train` runs a saved step over .npy batches with --set hyper-parameters and writes the
// trained parameters: the same numbers as eager steps over the same batches.
TEST(TracedOptimizers, KilnTrainRunsASavedStepAndWritesTheWeights) {
  MakeOptimizer make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
  };
  Trainer eager(make), saved(make);
  jit::TracedFunction traced = trace_named(saved);
  const std::string dir = ::testing::TempDir() + "/kiln_train_cli";
  std::filesystem::create_directories(dir);
  jit::save(traced, dir + "/step.kiln");
  const Tensor x2 = rnd({6, 12}, 92);
  const Tensor y2 = tensor({3.0, 2.0, 1.0, 0.0, 0.0, 2.0}, DType::Int64);
  write_npy(dir + "/x.npy", cat({batch_x(), x2}, 0));
  write_npy(dir + "/y.npy", cat({batch_y(), y2}, 0));
  eager.step()({batch_x(), batch_y()});  // the step the trace took
  for (int s = 0; s < 4; ++s) {
    if (s % 2 == 0)
      eager.step()({batch_x(), batch_y()});
    else
      eager.step()({x2, y2});
  }
  std::string out;
  const int rc =
      test::run_command(std::string(KILN_CLI_PATH) + " train " + dir + "/step.kiln --data " + dir +
                            "/x.npy --data " + dir + "/y.npy --steps 4 --log-every 2" +
                            " --set SGD.group0.lr=0.1 --set SGD.group0.momentum=0.9" +
                            " --set SGD.group0.dampening=0 --save " + dir + "/w.safetensors",
                        &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("step 4: "), std::string::npos) << out;
  const NamedTensors trained = read_safetensors(dir + "/w.safetensors");
  size_t matched = 0;
  for (const auto& [name, w] : eager.model->named_parameters()) {
    for (const auto& [n, t] : trained) {
      if (n != name) continue;
      EXPECT_LE(max_rel_error(t, w), 1e-4) << name;
      ++matched;
    }
  }
  EXPECT_EQ(matched, eager.model->named_parameters().size()) << out;
  // `kiln compile` makes the saved step an executable that trains the same way.
  out.clear();
  const std::string exe = dir + "/step_exe";
  ASSERT_EQ(
      test::run_command(
          std::string(KILN_CLI_PATH) + " compile " + dir + "/step.kiln --emit exe -o " + exe, &out),
      0)
      << out;
  ASSERT_EQ(test::run_command(exe + " --data " + dir + "/x.npy --data " + dir +
                                  "/y.npy --steps 4 --set SGD.group0.lr=0.1" +
                                  " --set SGD.group0.momentum=0.9 --set SGD.group0.dampening=0" +
                                  " --save " + dir + "/w_exe.safetensors",
                              &out),
            0)
      << out;
  const NamedTensors compiled = read_safetensors(dir + "/w_exe.safetensors");
  matched = 0;
  for (const auto& [name, w] : eager.model->named_parameters()) {
    for (const auto& [n, t] : compiled) {
      if (n != name) continue;
      EXPECT_LE(max_rel_error(t, w), 1e-4) << "compiled " << name;
      ++matched;
    }
  }
  EXPECT_EQ(matched, eager.model->named_parameters().size()) << out;
  // A missing hyper-parameter is named.
  out.clear();
  EXPECT_NE(test::run_command(std::string(KILN_CLI_PATH) + " train " + dir + "/step.kiln --data " +
                                  dir + "/x.npy --data " + dir + "/y.npy --steps 1",
                              &out),
            0);
  EXPECT_NE(out.find("--set SGD.group0.lr=VALUE"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// SGD with dampening from its very first step, through jit::compile(fn): the first step adds the
// gradient undamped (a host guard), so the second call re-traces once; ten steps follow eager.
TEST(TracedOptimizers, SgdDampeningFromTheFirstStep) {
  MakeOptimizer make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.05).momentum(0.9).dampening(0.3));
  };
  Trainer eager(make), compiled(make);
  jit::SpecializedFunction f = jit::compile(compiled.step(), no_disk_cache());
  for (int s = 1; s <= 10; ++s) {
    Tensor le = eager.step()({batch_x(), batch_y()})[0];
    Tensor lc = f({batch_x(), batch_y()})[0];
    EXPECT_LE(max_rel_error(lc, le), 1e-4) << "loss of step " << s;
  }
  EXPECT_EQ(f.num_specializations(), 2u);
  expect_same_parameters(*compiled.model, *eager.model, "after 10 steps");
  // Saved or compiled-ahead code cannot check the guard: a trace of a first step is refused.
  Trainer fresh(make);
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  jit::TracedFunction first = jit::trace(fresh.step(), {batch_x(), batch_y()}, quiet);
  for (int aot = 0; aot < 2; ++aot) {
    try {
      if (aot) {
        jit::AotOptions o;
        o.output = ::testing::TempDir() + "/kiln_first_step";
        jit::compile_aot(first, o);
      } else {
        jit::save_to_bytes(first);
      }
      ADD_FAILURE() << "a first step's trace was " << (aot ? "compiled ahead" : "saved");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("first momentum step"), std::string::npos) << e.what();
    }
  }
}

// LBFGS (max_iter = 1, no line search: one closure evaluation per step) compiled with
// jit::compile(fn) from its very first step: the first step's form is a host guard, so the second
// call re-traces once, and the ten steps follow eager (history growing past its size, lr an
// input). Line search and max_iter > 1 are refused by name.
TEST(TracedOptimizers, LbfgsStepsFollowEager) {
  auto make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::LBFGS>(p, optim::LBFGSOptions(0.3).max_iter(1).history_size(3));
  };
  struct Side {
    std::shared_ptr<nn::Module> model = make_model();
    std::unique_ptr<optim::Optimizer> opt;
  };
  Side eager{make_model(), nullptr}, compiled{make_model(), nullptr};
  eager.opt = make(eager.model->parameters());
  compiled.opt = make(compiled.model->parameters());
  auto stepper = [](Side& side) {
    return [&side](const TensorList& in) {
      auto closure = [&] {
        side.opt->zero_grad();
        Tensor loss = cross_entropy(side.model->forward(in[0]), in[1]);
        loss.backward();
        return loss;
      };
      return TensorList{side.opt->step(closure).detach()};
    };
  };
  jit::SpecializedFunction f = jit::compile(stepper(compiled), no_disk_cache());
  for (int s = 1; s <= 10; ++s) {
    const TensorList batch =
        s % 2 ? TensorList{batch_x(), batch_y()} : TensorList{rnd({6, 12}, 95), batch_y()};
    Tensor le = stepper(eager)(batch)[0];
    Tensor lc = f(batch)[0];
    EXPECT_LE(max_rel_error(lc, le), 1e-4) << "loss of step " << s;
  }
  EXPECT_EQ(f.num_specializations(), 2u);
  EXPECT_EQ(f.num_eager_calls(), 0u);
  expect_same_parameters(*compiled.model, *eager.model, "after 10 LBFGS steps");

  auto refused = [&](const optim::LBFGSOptions& o, const char* why) {
    Side side{make_model(), nullptr};
    side.opt = std::make_unique<optim::LBFGS>(side.model->parameters(), o);
    try {
      jit::trace(stepper(side), {batch_x(), batch_y()}, jit::SpecializeOptions::quiet_trace());
      ADD_FAILURE() << "traced: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(optim::LBFGSOptions(0.3), "max_iter = 1");
  refused(optim::LBFGSOptions(0.3).max_iter(1).line_search_fn("strong_wolfe"), "line search");
}

// compile_aot of a training step: an executable holding the parameters and optimizer state that
// runs the training loop (as `kiln train`) and writes the trained weights; the same numbers as
// eager steps over the same batches. A batch of the wrong shape is named and changes nothing.
void expect_aot_training_matches_eager(const MakeOptimizer& make, const std::string& tag) {
  Trainer eager(make), compiled(make);
  jit::TracedFunction traced = trace_named(compiled);
  const std::string dir = ::testing::TempDir() + "/kiln_aot_train_" + tag;
  std::filesystem::create_directories(dir);
  jit::AotOptions o;
  o.output = dir + "/step";
  jit::compile_aot(traced, o);
  const Tensor x2 = rnd({6, 12}, 93);
  const Tensor y2 = tensor({3.0, 2.0, 1.0, 0.0, 0.0, 2.0}, DType::Int64);
  write_npy(dir + "/x.npy", cat({batch_x(), x2}, 0));
  write_npy(dir + "/y.npy", cat({batch_y(), y2}, 0));
  eager.step()({batch_x(), batch_y()});  // the step the trace took
  for (int s = 0; s < 9; ++s)
    eager.step()(s % 2 == 0 ? TensorList{batch_x(), batch_y()} : TensorList{x2, y2});
  std::string set;
  for (const jit::HostValue& v : traced.host_values())
    if (v.capture) {
      char value[40];
      std::snprintf(value, sizeof value, "%.17g", v.traced);  // Adam's eps = 1e-8 intact
      set += " --set " + v.name + "=" + value;
    }
  std::string out;
  const std::string data = " --data " + dir + "/x.npy --data " + dir + "/y.npy";
  ASSERT_EQ(test::run_command(o.output + data + " --steps 9 --log-every 3" + set + " --save " +
                                  dir + "/w.safetensors",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("step 9: "), std::string::npos) << out;
  const NamedTensors trained = read_safetensors(dir + "/w.safetensors");
  size_t matched = 0;
  for (const auto& [name, w] : eager.model->named_parameters()) {
    for (const auto& [n, t] : trained) {
      if (n != name) continue;
      EXPECT_LE(max_rel_error(t, w), 1e-4) << tag << " " << name;
      ++matched;
    }
  }
  EXPECT_EQ(matched, eager.model->named_parameters().size()) << out;
  // Batches of the wrong shape: named, before any step.
  write_npy(dir + "/bad.npy", rnd({6, 11}, 94));
  out.clear();
  EXPECT_NE(
      test::run_command(
          o.output + " --data " + dir + "/bad.npy --data " + dir + "/y.npy --steps 1" + set, &out),
      0);
  EXPECT_NE(out.find("bad.npy: expected batches of [6,12] f32"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(TracedOptimizers, AotExecutableTrainsLikeEager) {
  expect_aot_training_matches_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
      },
      "sgd");
  expect_aot_training_matches_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01));
      },
      "adam");
}

}  // namespace
}  // namespace kiln
