// The roofline chart of a profile (include/kiln/profile.h, docs/profile.md "The roofline chart"): plain SVG
// written by hand, so that kiln needs no plotting library and the chart's text stays text.
//
// Layout, top to bottom: the title and what the numbers are; the log-log roofline (FLOP/s against FLOP/byte)
// with the ceilings and one point per kernel that has FLOPs; the legend beside it; a strip of bars for the
// kernels that only move data (they have no place on a FLOP axis: their bar is their estimated bandwidth
// against the copy ceiling); and a table of every kernel, so that each point's number can be looked up.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/profile.h"

namespace kiln {

namespace {

constexpr double kWidth = 1000;
constexpr double kPlotX = 90, kPlotY = 70, kPlotW = 600, kPlotH = 420;  // the roofline's axes box
constexpr double kRow = 15;                                             // a text row of the strip and table

std::string xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// 1.2 T, 340 G, 0.5: a value with an SI prefix, as the axes and the legend print rates.
std::string si(double v) {
  static const char* const kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (std::fabs(v) >= 1000 && p < 6) v /= 1000, ++p;
  if (p == 0) return fmt::format("{:g}", v);
  return fmt::format("{:.3g} {}", v, kPrefix[p]);
}

std::string text(double x, double y, std::string_view s, std::string_view attrs = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\"{}{}>{}</text>\n", x, y, attrs.empty() ? "" : " ", attrs, xml(s));
}
std::string line(double x1, double y1, double x2, double y2, std::string_view attrs) {
  return fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" {}/>\n", x1, y1, x2, y2, attrs);
}

const char* bound_colour(const std::string& bound) {
  if (bound == "math") return "#d95f02";
  if (bound == "shared") return "#7570b3";
  return "#1b9e77";  // memory
}

// One kernel's place on the chart.
struct Point {
  size_t launch = 0;          // index in PlanProfile::kernels
  double intensity = 0;       // FLOP per DRAM byte
  double flops_per_s = 0;     // estimated
  double roof = 0;            // its ceiling at that intensity
  double shared_ceiling = 0;  // its shared-memory ceiling, 0 when kiln models none for it
  double measured = 0;        // from a GPU run, 0 when none
};

struct Axes {
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;  // decades
  double x(double v) const { return kPlotX + (std::log10(v) - x_lo) / (x_hi - x_lo) * kPlotW; }
  double y(double v) const { return kPlotY + kPlotH - (std::log10(v) - y_lo) / (y_hi - y_lo) * kPlotH; }
};

// The ceilings, lowest first: a horizontal line from its ridge point (peak / bandwidth) on.
struct Ceiling {
  double flops = 0;
  std::string label;
};
std::vector<Ceiling> ceilings(const DevicePeaks& p) {
  std::vector<Ceiling> c{{p.simt_fp32_flops, "FP32 SIMT"}};
  if (p.mma_sync_flops > 0 && p.mma_sync_flops == p.tensor_flops) {
    c.push_back({p.mma_sync_flops, "tensor cores (mma.sync: kiln's main loop)"});
  } else {
    if (p.mma_sync_flops > 0) c.push_back({p.mma_sync_flops, "mma.sync (kiln's main loop)"});
    if (p.tensor_flops > 0) c.push_back({p.tensor_flops, "tensor cores, best path (wgmma)"});
  }
  return c;
}

Axes axes_for(const PlanProfile& prof, const std::vector<Point>& points) {
  const double bw = prof.peaks.copy_bytes_per_s;
  double x_min = 1e300, x_max = 0, y_min = 1e300, y_max = 0;
  for (const Ceiling& c : ceilings(prof.peaks)) {
    x_min = std::min(x_min, c.flops / bw), x_max = std::max(x_max, c.flops / bw);
    y_max = std::max(y_max, c.flops);
  }
  for (const Point& p : points) {
    x_min = std::min(x_min, p.intensity), x_max = std::max(x_max, p.intensity);
    for (double v : {p.flops_per_s, p.measured})
      if (v > 0) y_min = std::min(y_min, v), y_max = std::max(y_max, v);
  }
  Axes a;
  a.x_lo = std::floor(std::log10(x_min)) - 1;
  a.x_hi = std::max(std::ceil(std::log10(x_max)) + 1, a.x_lo + 3);
  // The copy ceiling's value at the left edge bounds the view from below unless a point lies lower.
  y_min = std::min(y_min, bw * std::pow(10.0, a.x_lo));
  a.y_lo = std::floor(std::log10(y_min));
  a.y_hi = std::max(std::ceil(std::log10(y_max * 1.5)), a.y_lo + 2);
  return a;
}

std::string draw_axes(const Axes& a) {
  std::string s =
      fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" stroke=\"#444444\"/>\n", kPlotX,
                  kPlotY, kPlotW, kPlotH);
  for (double d = a.x_lo; d <= a.x_hi + 1e-9; ++d) {
    const double x = a.x(std::pow(10.0, d));
    s += line(x, kPlotY, x, kPlotY + kPlotH, "stroke=\"#e5e5e5\"");
    s += text(x, kPlotY + kPlotH + 16, si(std::pow(10.0, d)), "text-anchor=\"middle\"");
  }
  for (double d = a.y_lo; d <= a.y_hi + 1e-9; ++d) {
    const double y = a.y(std::pow(10.0, d));
    s += line(kPlotX, y, kPlotX + kPlotW, y, "stroke=\"#e5e5e5\"");
    s += text(kPlotX - 6, y + 4, si(std::pow(10.0, d)), "text-anchor=\"end\"");
  }
  s += text(kPlotX + kPlotW / 2, kPlotY + kPlotH + 36, "arithmetic intensity (FLOP per DRAM byte)",
            "text-anchor=\"middle\"");
  s += text(22, kPlotY + kPlotH / 2, "FLOP/s",
            fmt::format("text-anchor=\"middle\" transform=\"rotate(-90 22 {:.1f})\"", kPlotY + kPlotH / 2));
  return s;
}

std::string draw_ceilings(const PlanProfile& prof, const Axes& a) {
  const double bw = prof.peaks.copy_bytes_per_s;
  const double x_edge = std::pow(10.0, a.x_hi), x_start = std::pow(10.0, a.x_lo);
  std::string s = "<g stroke-width=\"2\" fill=\"none\">\n";
  const double top = ceilings(prof.peaks).back().flops;
  s += line(a.x(x_start), a.y(bw * x_start), a.x(top / bw), a.y(top), "stroke=\"#1f4e79\"");
  s += "</g>\n";
  s += text(a.x(x_start) + 8, a.y(bw * x_start) - 8, fmt::format("copy {}B/s", si(bw)), "fill=\"#1f4e79\"");
  for (const Ceiling& c : ceilings(prof.peaks)) {
    s += line(a.x(c.flops / bw), a.y(c.flops), a.x(x_edge), a.y(c.flops), "stroke=\"#333333\" stroke-width=\"2\"");
    s += text(a.x(x_edge) - 4, a.y(c.flops) - 5, fmt::format("{} {}FLOP/s", c.label, si(c.flops)),
              "text-anchor=\"end\" fill=\"#333333\"");
  }
  return s;
}

std::string draw_points(const PlanProfile& prof, const std::vector<Point>& points, const Axes& a) {
  std::string s;
  for (const Point& p : points) {
    const KernelProfileRow& r = prof.kernels[p.launch];
    const double x = a.x(p.intensity), y = a.y(p.flops_per_s);
    // The distance to the roof (dotted), and the shared-memory ceiling where it lies below the roof.
    s += line(x, y, x, a.y(p.roof), "stroke=\"#888888\" stroke-dasharray=\"2,3\"");
    if (p.shared_ceiling > 0 && p.shared_ceiling < p.roof)
      s += line(x - 7, a.y(p.shared_ceiling), x + 7, a.y(p.shared_ceiling), "stroke=\"#7570b3\" stroke-width=\"2\"");
    if (p.measured > 0) {
      const double ym = a.y(p.measured);
      s += line(x, y, x, ym, "stroke=\"#000000\" stroke-width=\"1\"");
      s += fmt::format("<path d=\"M {:.1f} {:.1f} l 5 5 l -5 5 l -5 -5 z\" fill=\"#000000\"/>\n", x, ym - 5);
    }
    const std::string fill = r.counters ? bound_colour(r.estimate.bound) : "#ffffff";
    s += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4.5\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\">"
        "<title>#{} group {} {}: {:.1f} us, {} bound, {:.0f}% of its roof</title></circle>\n",
        x, y, fill, bound_colour(r.estimate.bound), p.launch, r.group, xml(r.family), r.estimate.us, r.estimate.bound,
        100 * p.flops_per_s / p.roof);
    s +=
        text(x + 6, y - 4, fmt::format("#{} g{} {}", p.launch, r.group, r.family), "font-size=\"10\" fill=\"#222222\"");
  }
  return s;
}

// The legend, right of the plot: what each mark means and the rules by which points are placed.
std::string draw_legend(const PlanProfile& prof, const RooflineOptions& opt, size_t drawn, size_t data_only,
                        size_t without_counters) {
  const double x = kPlotX + kPlotW + 20;
  double y = kPlotY + 10;
  std::string s;
  auto item = [&](std::string mark, std::string_view what) {
    s += mark;
    s += text(x + 18, y + 4, what);
    y += 18;
  };
  s += text(x, y, "estimated, by what bounds it:", "font-weight=\"bold\"");
  y += 18;
  for (const char* b : {"memory", "math", "shared"}) {
    item(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4.5\" fill=\"{}\"/>\n", x + 6, y, bound_colour(b)), b);
  }
  item(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4.5\" fill=\"#ffffff\" stroke=\"#1b9e77\" stroke-width=\"1.5\"/>\n",
                   x + 6, y),
       "hollow: no emulated counters");
  item(line(x + 6, y - 7, x + 6, y + 7, "stroke=\"#888888\" stroke-dasharray=\"2,3\""), "dotted: up to its roof");
  item(line(x, y, x + 12, y, "stroke=\"#7570b3\" stroke-width=\"2\""), "tick: its shared-memory ceiling");
  if (!opt.measured.empty()) {
    item(fmt::format("<path d=\"M {} {} l 5 5 l -5 5 l -5 -5 z\"/>\n", x + 6, y - 5), "measured on a GPU");
  }
  y += 8;
  std::vector<std::string> notes{
      fmt::format("{} of {} kernels drawn here;", drawn, prof.kernels.size()),
      "x: FLOPs / DRAM bytes (the emulator's",
      "counters carried to these shapes);",
      "y: FLOPs / estimated time.",
  };
  if (without_counters > 0) {
    notes.push_back(fmt::format("{} without counters: placed by", without_counters));
    notes.push_back("the plan's bytes (hollow).");
  }
  if (data_only > 0) {
    notes.push_back(fmt::format("{} move data only (0 FLOP): bars", data_only));
    notes.push_back("below, against the copy ceiling.");
  }
  if (!opt.measured.empty()) notes.push_back("measured: " + opt.measured_source);
  notes.push_back("Estimates, not measurements:");
  notes.push_back("docs/profile.md says how.");
  for (const std::string& n : notes) {
    s += text(x, y, n, "font-size=\"11\"");
    y += 14;
  }
  return s;
}

// The kernels with no FLOPs: one bar each, its estimated bandwidth as a share of the copy ceiling.
std::string draw_data_strip(const PlanProfile& prof, const std::vector<size_t>& rows,
                            const std::map<int, double>& measured, double& y) {
  if (rows.empty()) return {};
  const double bw = prof.peaks.copy_bytes_per_s, x0 = kPlotX + 160, w = kPlotW - 160;
  std::string s = text(kPlotX, y, "Kernels that only move data: estimated bandwidth against the copy ceiling",
                       "font-weight=\"bold\"");
  y += kRow + 2;
  for (size_t i : rows) {
    const KernelProfileRow& r = prof.kernels[i];
    const double rate = r.estimate.us > 0 ? r.dram_bytes / (r.estimate.us * 1e-6) : 0;
    const double frac = std::clamp(rate / bw, 0.0, 1.0);
    s += text(kPlotX, y + 10, fmt::format("#{} {}", i, r.family), "font-size=\"11\"");
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"10\" fill=\"#f0f0f0\" stroke=\"#cccccc\"/>\n", x0,
        y + 1, w);
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"10\" fill=\"{}\"/>\n", x0, y + 1,
                     w * frac, r.counters ? bound_colour(r.estimate.bound) : "#b0b0b0");
    std::string label = r.estimate.us > 0 ? fmt::format("{}B/s, {:.0f}% of copy", si(rate), 100 * frac)
                                          : std::string("no bytes: nothing to estimate");
    if (auto m = measured.find(r.group); m != measured.end() && m->second > 0) {
      const double mfrac = std::clamp(r.dram_bytes / (m->second * 1e-6) / bw, 0.0, 1.0);
      s += fmt::format("<path d=\"M {:.1f} {:.1f} l 5 5 l -5 5 l -5 -5 z\"/>\n", x0 + w * mfrac, y + 1);
      label += fmt::format("; measured {:.0f}%", 100 * mfrac);
    }
    s += text(x0 + w + 8, y + 10, label, "font-size=\"11\"");
    y += kRow;
  }
  y += 18;
  return s;
}

std::string draw_table(const PlanProfile& prof, const std::vector<Point>& points, double& y) {
  std::map<size_t, const Point*> by_launch;
  for (const Point& p : points) by_launch[p.launch] = &p;
  std::string s = text(kPlotX, y, "Every kernel, in launch order (#: the points' numbers)", "font-weight=\"bold\"");
  y += kRow + 2;
  const std::string head = fmt::format("{:>4}  {:>5}  {:<22} {:<26} {:<7} {:>9}  {:>7}  {}", "#", "group", "family",
                                       "config", "bound", "est us", "of roof", "limiters");
  s += text(kPlotX, y, head, "font-family=\"monospace\" font-size=\"11\" xml:space=\"preserve\" font-weight=\"bold\"");
  y += kRow;
  for (size_t i = 0; i < prof.kernels.size(); ++i) {
    const KernelProfileRow& r = prof.kernels[i];
    std::string roof = "-";
    if (auto it = by_launch.find(i); it != by_launch.end()) {
      roof = fmt::format("{:.0f}%", 100 * it->second->flops_per_s / it->second->roof);
    } else if (r.estimate.us > 0) {
      roof = fmt::format("{:.0f}%", 100 * r.estimate.ceiling_fraction);
    }
    std::string limiters;
    for (const std::string& l : r.estimate.limiters) limiters += (limiters.empty() ? "" : ",") + l;
    const std::string row =
        fmt::format("{:>4}  {:>5}  {:<22} {:<26} {:<7} {:>9.1f}  {:>7}  {}", i, r.group, r.family.substr(0, 22),
                    r.config.substr(0, 26), r.estimate.bound, r.estimate.us, roof, limiters.empty() ? "-" : limiters);
    s += text(kPlotX, y, row, "font-family=\"monospace\" font-size=\"11\" xml:space=\"preserve\"");
    y += kRow;
  }
  return s;
}

}  // namespace

std::string roofline_svg(const PlanProfile& prof, const RooflineOptions& opt) {
  std::map<int, double> measured;
  for (const MeasuredKernel& m : opt.measured) measured[m.group] = m.us;
  const double bw = prof.peaks.copy_bytes_per_s;
  std::vector<Point> points;
  std::vector<size_t> data_only;
  size_t without_counters = 0;
  for (size_t i = 0; i < prof.kernels.size(); ++i) {
    const KernelProfileRow& r = prof.kernels[i];
    without_counters += r.counters ? 0 : 1;
    // On a FLOP axis only what does FLOPs in a measurable time; a kernel whose bytes the plan does not
    // know is placed by its FLOPs over the copy ceiling's ridge (said in the table as any other).
    if (r.flops <= 0 || r.estimate.us <= 0) {
      data_only.push_back(i);
      continue;
    }
    Point p;
    p.launch = i;
    p.intensity = r.dram_bytes > 0 ? r.flops / r.dram_bytes : ceilings(prof.peaks).back().flops / bw;
    p.flops_per_s = r.flops / (r.estimate.us * 1e-6);
    p.roof = std::min(bw * p.intensity, r.tensor_cores ? prof.peaks.mma_sync_flops : prof.peaks.simt_fp32_flops);
    if (r.estimate.shared_us > 0) p.shared_ceiling = r.flops / (r.estimate.shared_us * 1e-6);
    if (auto m = measured.find(r.group); m != measured.end() && m->second > 0)
      p.measured = r.flops / (m->second * 1e-6);
    points.push_back(p);
  }
  const Axes a = axes_for(prof, points);

  std::string body = text(kPlotX, 24, opt.title.empty() ? "kiln profile: roofline" : "kiln profile: " + opt.title,
                          "font-size=\"16\" font-weight=\"bold\"");
  body += text(kPlotX, 44,
               fmt::format("target {} ({}, {} SMs): every point is kiln's estimate from the emulator's counters "
                           "and the kernel's resources",
                           prof.target.name, prof.target.arch, prof.target.sm_count),
               "font-size=\"12\"");
  body += draw_axes(a) + draw_ceilings(prof, a) + draw_points(prof, points, a);
  if (points.empty()) {
    body += text(kPlotX + kPlotW / 2, kPlotY + kPlotH / 2, "no kernel with FLOPs: see the bars below",
                 "text-anchor=\"middle\" fill=\"#888888\"");
  }
  body += draw_legend(prof, opt, points.size(), data_only.size(), without_counters);
  double y = kPlotY + kPlotH + 64;
  body += draw_data_strip(prof, data_only, measured, y);
  body += draw_table(prof, points, y);
  const double height = y + 10;
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0} {1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n{2}</svg>\n",
      kWidth, height, body);
}

}  // namespace kiln
