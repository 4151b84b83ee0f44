// The Queue dock: configs start in the order the list shows, which the user changes by dragging,
// Alt+Up/Alt+Down or the context menu; Delete and the Remove button drop the selected ones.
#include <QtTest>

#include <QPushButton>
#include <QTemporaryDir>

#include "engine/api/workbench_api.h"
#include "tests/ui/ui_test_util.h"
#include "ui/main_window/main_window.h"
#include "ui/main_window/queue_list.h"
#include "ui/run_config/config_editor.h"

using namespace tb;

namespace {

QStringList labels(const ui::QueueList& list) {
  QStringList out;
  for (int r = 0; r < list.count(); ++r)
    out << list.entryAt(r).label;
  return out;
}

void select(ui::QueueList& list, std::initializer_list<int> rows) {
  list.clearSelection();
  for (int r : rows)
    list.item(r)->setSelected(true);
}

}  // namespace

class TestQueue : public QObject {
  Q_OBJECT

 private slots:
  void entriesKeepTheirConfigWhenMovedAndRemoved() {
    ui::QueueList list;
    QSignalSpy changed(&list, &ui::QueueList::queueChanged);
    for (const char* name : {"a", "b", "c", "d"})
      list.append({QStringLiteral("[run]\nname = \"%1\"\n").arg(QLatin1String(name)),
                   QLatin1String(name), 0});
    list.append({QString(), QStringLiteral("resume 7"), 7});
    QCOMPARE(changed.count(), 5);
    // Two selected rows move up together; once one is at the top, neither moves.
    select(list, {1, 3});
    list.moveSelected(-1);
    QCOMPARE(labels(list), QStringList({"b", "a", "d", "c", "resume 7"}));
    QVERIFY(list.item(0)->isSelected() && list.item(2)->isSelected());
    list.moveSelected(-1);
    QCOMPARE(labels(list), QStringList({"b", "a", "d", "c", "resume 7"}));
    // The keyboard: Alt+Down moves the selection down, Delete removes it.
    list.setFocus();
    select(list, {2});
    QTest::keyClick(&list, Qt::Key_Down, Qt::AltModifier);
    QCOMPARE(labels(list), QStringList({"b", "a", "c", "d", "resume 7"}));
    QVERIFY(list.item(3)->isSelected());
    QTest::keyClick(&list, Qt::Key_Delete);
    QCOMPARE(labels(list), QStringList({"b", "a", "c", "resume 7"}));
    // Each entry still carries its own config and run to resume.
    QCOMPARE(list.entryAt(1).configText, QStringLiteral("[run]\nname = \"a\"\n"));
    QCOMPARE(list.entryAt(3).resumeRun, qint64{7});
    QCOMPARE(list.entryAt(3).configText, QString());
    list.dropFront();
    QCOMPARE(labels(list), QStringList({"a", "c", "resume 7"}));
    QCOMPARE(list.entryAt(5).label, QString());  // past the end: an empty entry
  }

  void theQueueStartsInTheOrderShown() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    ui::MainWindow window(db);
    for (const char* name : {"first", "second", "third"}) {
      QVERIFY(window.configEditor()->setToml(test::blobsConfig(5, QLatin1String(name))));
      window.enqueueCurrent();
    }
    ui::QueueList* list = window.queueList();
    QCOMPARE(labels(*list), QStringList({"first", "second", "third"}));
    auto* remove = window.findChild<QPushButton*>(QStringLiteral("removeQueued"));
    QVERIFY(remove != nullptr);
    QVERIFY(!remove->isEnabled());  // nothing selected
    select(*list, {2});
    list->moveSelected(-1);
    list->moveSelected(-1);
    select(*list, {1});
    QVERIFY(remove->isEnabled());
    remove->click();  // "first", now second, leaves the queue
    QCOMPARE(labels(*list), QStringList({"third", "second"}));
    QVERIFY(!remove->isEnabled());
    window.setQueueParallel(1);
    window.startQueue();
    QTRY_COMPARE_WITH_TIMEOUT(window.queuedCount(), 0, 60000);
    QTRY_VERIFY_WITH_TIMEOUT(
        test::runsTrainingPast(db, 0) == 0 && api::StoreReader(db.toStdString()).runs().size() == 2,
        60000);
    // Run 1 is the one moved to the top.
    const auto runs = api::StoreReader(db.toStdString()).runs();
    QStringList names;
    for (const auto& r : runs)
      names << QString::fromStdString(r.name);
    names.sort();  // runs() is newest first; ids say the order
    QCOMPARE(names, QStringList({"second", "third"}));
    for (const auto& r : runs)
      QCOMPARE(QString::fromStdString(r.name),
               r.id == 1 ? QStringLiteral("third") : QStringLiteral("second"));
  }
};

QTEST_MAIN(TestQueue)
#include "tst_queue.moc"
