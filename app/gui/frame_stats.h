// Frame-time figures that add up. The screenshot mode once printed "frame time avg 4.55 ms, max
// 1.41 ms": the average was an exponential moving average over every frame, the first (font atlas,
// textures, layout) included, while the maximum skipped those warm-up frames. Both now come from
// the same frames, so mean <= max always; the status bar shows a smoothed recent value separately.
#pragma once

#include <algorithm>

namespace attnscope::gui {

class FrameStats {
 public:
  static constexpr int kWarmup = 5;  // the first frames build the font atlas and textures

  void record(double ms) {
    ++frames_;
    recent_ = frames_ == 1 ? ms : 0.9 * recent_ + 0.1 * ms;
    if (frames_ <= kWarmup) return;
    ++counted_;
    sum_ += ms;
    max_ = std::max(max_, ms);
  }
  int frames() const { return frames_; }    // every frame drawn
  int counted() const { return counted_; }  // after the warm-up: what mean() and max() cover
  double mean() const { return counted_ ? sum_ / counted_ : 0.0; }
  double max() const { return max_; }
  double recent() const { return recent_; }  // moving average for the status bar (all frames)

 private:
  int frames_ = 0, counted_ = 0;
  double sum_ = 0, max_ = 0, recent_ = 0;
};

}  // namespace attnscope::gui
