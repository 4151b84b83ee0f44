// A scroll area that scrolls up and down only: as wide as its widget's least width (plus the
// scroll bar), so that a page in a tab or dock is never cut at the right, while its height may
// be anything.
#pragma once

#include <QScrollArea>

namespace tb::ui {

class VerticalScrollArea : public QScrollArea {
 public:
  explicit VerticalScrollArea(QWidget* parent = nullptr);
  QSize minimumSizeHint() const override;

  /// Gives the page the area's height and scrolls only below the page's least height. By
  /// default (QScrollArea's own way) a page whose layout has a height-for-width item (a
  /// word-wrapped label) is given its preferred height, and so scrolls as soon as the area is
  /// shorter than that, although its parts could shrink. The area's least width is then
  /// QScrollArea's own.
  void setFitsLeastHeight(bool on);

 protected:
  /// The page's least width changed (its layout asked for a new one): so does this area's.
  bool eventFilter(QObject* watched, QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool viewportEvent(QEvent* event) override;

 private:
  void fitPage();
  bool m_fitsLeastHeight = false;
  bool m_fitting = false;
};

}  // namespace tb::ui
